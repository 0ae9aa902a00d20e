"""The pinned components are the upstream projects' own manifests (vendored under
skills/eks_cluster_manager/manifests/upstream/, sources in SOURCES.yaml) with only the
changes the one table (upstream.CHANGES) lists: any other difference between what
auto_fix applies and the vendored file fails here. Plus the five issue-25 items that
would break a real cluster, each pinned by a test that today's old output fails."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from skills.eks_cluster_manager import upstream
from skills.eks_cluster_manager.components import BY_KEY, COMPONENTS, CRD_FILE, pytorchjob_crd

TRAINJOB_CRDS = Path("skills/training_job_deployer/targets/trainjob/crds")  # byte-identical
MIRRORS = {"trainer": Path("/work/.mirror/kubeflow+trainer/repo"),
           "jobset": Path("/work/.mirror/kubernetes-sigs+jobset/repo")}  # fmt: skip
DCGM_MIRROR = Path("/work/.mirror/NVIDIA+dcgm-exporter/repo")
JOBSET_ASSET = "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"


def _diffs(ours, theirs, path=()):
    """Every path where the two JSON values differ (leaves, or a whole missing key)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in ours.keys() | theirs.keys():
            if key not in ours or key not in theirs:
                yield (*path, key)
            else:
                yield from _diffs(ours[key], theirs[key], (*path, key))
    elif isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            yield from _diffs(a, b, (*path, i))
    elif ours != theirs:
        yield path


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.key)
def test_auto_fix_applies_upstream_with_only_the_listed_changes(component):
    theirs = upstream.upstream_objects(component.key)
    ours = component.manifests("jobs")
    assert len(ours) == len(theirs)
    rows = [c for c in upstream.CHANGES if c.component == component.key]
    used = set()
    for mine, original in zip(ours, theirs, strict=True):
        ident = (original["kind"], original["metadata"]["name"])
        listed = [c for c in rows if (c.kind, c.name) == ident]
        for diff in _diffs(mine, original):
            covering = [c for c in listed if diff[: len(c.path)] == c.path]
            assert covering, f"{component.key} {ident}: unlisted difference at {diff}"
            used.update(covering)
    assert set(rows) == used, "a row of CHANGES that changes nothing"
    for change in rows:
        assert change.reason  # every change says why


def test_every_vendored_file_has_its_source_recorded():
    sources = yaml.safe_load((upstream.UPSTREAM_DIR / "SOURCES.yaml").read_text())
    for key, name in upstream.FILES.items():
        assert sources[key]["file"] == name and (upstream.UPSTREAM_DIR / name).is_file()
        assert sources[key]["repo"].startswith("https://github.com/")
        assert len(sources[key]["commit"]) == 40


def test_the_shipped_crd_is_upstream_v1_9_4s():
    (crd,) = [
        o
        for o in upstream.upstream_objects("training_operator")
        if o["kind"] == "CustomResourceDefinition" and o["metadata"]["name"] == pytorchjob_crd()[
            "metadata"]["name"]
    ]  # fmt: skip
    assert crd == pytorchjob_crd()
    if MIRRORS["trainer"].is_dir():  # byte-identical to upstream's file at the tag
        theirs = _git("trainer", "show", "v1.9.4:manifests/base/crds/kubeflow.org_pytorchjobs.yaml")
        assert gzip.decompress(CRD_FILE.read_bytes()) == theirs


def _only(key, kind):
    (obj,) = [o for o in BY_KEY[key].manifests("jobs") if o["kind"] == kind]
    return obj


def test_etcd_serves_the_v2_api_torchrun_speaks():
    pod = _only("etcd", "Pod")
    command = pod["spec"]["containers"][0]["command"]
    assert "--enable-v2" in command  # etcd 3.5 serves no v2 without it
    assert pod["spec"]["containers"][0]["image"] == "quay.io/coreos/etcd:v3.5.33"
    service = _only("etcd", "Service")
    assert (service["metadata"]["name"], service["spec"]["ports"][0]["port"]) == ("etcd", 2379)
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_efa_plugin_mounts_dev_infiniband_and_skips_auto_mode():
    pod = _only("efa_device_plugin", "DaemonSet")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["infiniband-volume"] == "/dev/infiniband/"
    assert {"name": "infiniband-volume", "hostPath": {"path": "/dev/infiniband/"}} in pod["volumes"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    types, auto = term["matchExpressions"]
    assert auto == {
        "key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["auto"]
    }  # fmt: skip
    assert {"p5.48xlarge", "ml.p5.48xlarge", "p6-b200.48xlarge"} <= set(types["values"])
    assert "g5.xlarge" not in types["values"]  # no EFA
    keys = {t["key"] for t in pod["tolerations"]}
    assert {"aws.amazon.com/efa", "nvidia.com/gpu", "CriticalAddonsOnly"} <= keys


def test_nvidia_plugin_tolerates_the_efa_taint_and_selects_no_instance_list():
    pod = _only("nvidia_device_plugin", "DaemonSet")["spec"]["template"]["spec"]
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "aws.amazon.com/efa"}
    assert "affinity" not in pod  # as upstream: every node, idle where there is no GPU


def test_training_operator_image_and_probes_are_upstream_v1_9_4s():
    deployment = _only("training_operator", "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
    assert container["image"] == BY_KEY["training_operator"].image
    live, ready = container["livenessProbe"], container["readinessProbe"]
    assert (live["initialDelaySeconds"], live["periodSeconds"], live["timeoutSeconds"]) == (
        15, 20, 3)  # fmt: skip
    assert (ready["initialDelaySeconds"], ready["periodSeconds"], ready["timeoutSeconds"]) == (
        10, 15, 3)  # fmt: skip


def test_an_unlisted_difference_is_found():
    # The comparison itself: a change not in the table (here: a dropped probe) is caught.
    ours = BY_KEY["training_operator"].manifests("jobs")
    deployment = next(o for o in ours if o["kind"] == "Deployment")
    del deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    theirs = upstream.upstream_objects("training_operator")
    diffs = [d for a, b in zip(ours, theirs, strict=True) for d in _diffs(a, b)]
    assert diffs == [("spec", "template", "spec", "containers", 0, "livenessProbe")]


def test_the_hand_rendered_efa_chart_follows_the_charts_values():
    # No helm here: the vendored render is checked against the chart's own values.yaml.
    chart = upstream.UPSTREAM_DIR / "aws-efa-k8s-device-plugin-chart-v0.5.30"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    (ds,) = upstream.upstream_objects("efa_device_plugin")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"{values['image']['repository']}:{values['image']['tag']}"
    assert values["image"]["tag"] == meta["appVersion"] == BY_KEY["efa_device_plugin"].version
    assert container["securityContext"] == values["securityContext"]
    assert container["resources"] == values["resources"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    labels = values["supportedInstanceLabels"]
    assert term["matchExpressions"][0]["key"] == labels["keys"][0]
    assert term["matchExpressions"][0]["values"] == labels["values"]
    assert ds["metadata"]["labels"]["helm.sh/chart"] == f"{meta['name']}-{meta['version']}"


def test_trainer_and_jobset_split_the_overlay_whole_and_in_order():
    whole = upstream.file_objects("kubeflow_trainer")
    trainer, jobset = (upstream.upstream_objects(k) for k in ("kubeflow_trainer", "jobset"))
    assert len(trainer) + len(jobset) == len(whole)
    assert [o for o in whole if o in jobset] == jobset  # each part keeps the file's order
    names = {(o["kind"], o["metadata"]["name"]) for o in jobset}
    assert ("Deployment", "jobset-controller-manager") in names
    assert ("CustomResourceDefinition", "jobsets.jobset.x-k8s.io") in names
    assert not any("trainer" in name for _, name in names)
    assert trainer[0] == {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"name": "kubeflow-system"}}  # fmt: skip
    # As the overlay ships JobSet: in Trainer's namespace, image from registry.k8s.io.
    deployment = next(o for o in jobset if o["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "kubeflow-system"
    images = [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert images == [BY_KEY["jobset"].image]


def _vendored_crd(name: str) -> dict:
    return yaml.load(gzip.decompress((TRAINJOB_CRDS / name).read_bytes()), Loader=yaml.CSafeLoader)


@pytest.mark.parametrize(
    ("component", "crd"),
    [("kubeflow_trainer", "trainer.kubeflow.org_trainjobs.v2.3.0.yaml.gz"),
     ("kubeflow_trainer", "trainer.kubeflow.org_trainingruntimes.v2.3.0.yaml.gz"),
     ("kubeflow_trainer", "trainer.kubeflow.org_clustertrainingruntimes.v2.3.0.yaml.gz")],
)  # fmt: skip
def test_the_trainer_crds_installed_are_the_ones_the_trainjob_target_validates_against(
    component, crd
):
    theirs = _vendored_crd(crd)  # byte for byte upstream's (their SOURCES.yaml)
    (ours,) = [o for o in BY_KEY[component].manifests() if o["metadata"]["name"] ==
               theirs["metadata"]["name"]]  # fmt: skip
    assert ours == theirs


def test_the_jobset_crd_is_upstreams_with_the_release_builds_conversion_webhook():
    theirs = _vendored_crd("jobset.x-k8s.io_jobsets.v0.12.0.yaml.gz")
    (ours,) = [o for o in BY_KEY["jobset"].manifests() if o["kind"] == "CustomResourceDefinition"]
    assert ours["spec"]["versions"] == theirs["spec"]["versions"]
    # config/default's webhook_in_jobsets patch, pointed at the namespace the overlay sets
    service = ours["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert (service["name"], service["namespace"]) == ("jobset-webhook-service", "kubeflow-system")


def test_the_torch_distributed_runtime_is_upstreams_with_the_overlays_label():
    theirs = yaml.safe_load((TRAINJOB_CRDS / "torch_distributed.v2.3.0.yaml").read_text())
    runtimes = BY_KEY["kubeflow_trainer_runtimes"].manifests()
    (ours,) = [o for o in runtimes if o["metadata"]["name"] == "torch-distributed"]
    labels = ours["metadata"].pop("labels")
    assert labels == {**theirs["metadata"].pop("labels"),
                      "trainer.kubeflow.org/webhook-validation": "disabled"}  # fmt: skip
    ours["metadata"].pop("name"), theirs["metadata"].pop("name")
    assert ours == theirs
    image = ours["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["containers"][0]["image"]  # fmt: skip
    assert image == BY_KEY["kubeflow_trainer_runtimes"].image


# --- byte for byte: each kustomize render again from the mirrored tags (where they are) ---


def _git(repo: str, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(MIRRORS[repo]), *args], check=True,
                          capture_output=True).stdout  # fmt: skip


def _tree(repo: str, tag: str, path: str, into: Path) -> Path:
    into.mkdir(parents=True)
    archive = _git(repo, "archive", tag, path)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _kustomize(path: Path) -> bytes:
    return subprocess.run(["kubectl", "kustomize", str(path)], check=True,
                          capture_output=True).stdout  # fmt: skip


def _render(key: str, tmp: Path) -> bytes:
    """SOURCES.yaml's `how:` of each rendered file, as commands."""
    if key == "training_operator":
        tree = _tree("trainer", "v1.9.4", "manifests", tmp / "v1")
        return _kustomize(tree / "manifests/overlays/standalone")
    tree = _tree("trainer", "v2.3.0", "manifests", tmp / "v2")
    if key == "kubeflow_trainer_runtimes":
        return _kustomize(tree / "manifests/overlays/runtimes")
    jobset = _tree("jobset", "v0.12.0", "config", tmp / "jobset")
    third_party = tree / "manifests/third-party/jobset"
    (third_party / "manifests.yaml").write_bytes(_kustomize(jobset / "config/default"))
    kustomization = third_party / "kustomization.yaml"
    text = kustomization.read_text()
    assert JOBSET_ASSET in text
    kustomization.write_text(text.replace(JOBSET_ASSET, "manifests.yaml"))
    return _kustomize(tree / "manifests/overlays/manager")


@pytest.mark.skipif(
    not (shutil.which("kubectl") and all(m.is_dir() for m in MIRRORS.values())),
    reason="needs kubectl (its kustomize) and the upstream mirrors",
)
@pytest.mark.parametrize("key", ["training_operator", "kubeflow_trainer",
                                 "kubeflow_trainer_runtimes"])  # fmt: skip
def test_each_rendered_file_is_upstreams_render_at_its_tag_byte_for_byte(key, tmp_path):
    path = upstream.UPSTREAM_DIR / upstream.FILES[key]
    vendored = path.read_bytes()
    if path.suffix == ".gz":
        vendored = gzip.decompress(vendored)
    assert _render(key, tmp_path) == vendored


@pytest.mark.skipif(not DCGM_MIRROR.is_dir(), reason="needs the NVIDIA/dcgm-exporter mirror")
def test_the_dcgm_exporter_file_is_upstreams_static_manifest_at_its_tag_byte_for_byte():
    source = yaml.safe_load((upstream.UPSTREAM_DIR / "SOURCES.yaml").read_text())["dcgm_exporter"]
    theirs = subprocess.run(
        ["git", "-C", str(DCGM_MIRROR), "show", f"{source['tag']}:{source['path']}"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    commit = subprocess.run(["git", "-C", str(DCGM_MIRROR), "rev-parse", f"{source['tag']}^{{}}"],
                            check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert (upstream.UPSTREAM_DIR / upstream.FILES["dcgm_exporter"]).read_bytes() == theirs
    assert commit == source["commit"]


def test_the_dcgm_exporter_runs_on_our_tainted_gpu_nodes_only_in_kube_system():
    """Upstream's static manifest names no namespace, tolerates no taint and runs on every
    node: as applied, it lands in kube-system, on our GPU node groups' tainted nodes, and
    not on CPU nodes (where it could never be ready)."""
    ds, service = BY_KEY["dcgm_exporter"].manifests("jobs")
    assert (ds["kind"], service["kind"]) == ("DaemonSet", "Service")
    assert {ds["metadata"]["namespace"], service["metadata"]["namespace"]} == {"kube-system"}
    pod = ds["spec"]["template"]["spec"]
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "aws.amazon.com/efa"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (expression,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert {"p4d.24xlarge", "p5.48xlarge", "ml.p5.48xlarge"} <= set(expression["values"])
    assert "m5.xlarge" not in expression["values"]
    assert pod["containers"][0]["image"] == BY_KEY["dcgm_exporter"].image
