"""Custom resources checked as the API server checks them on create: the vendored CRDs'
schemas and CEL rules (x-kubernetes-validations), refusals worded as upstream words them."""

from __future__ import annotations

import copy
import gzip
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from skills.kube import crd_validation as cv
from skills.kube.crd_cel import to_cel
from skills.shared.errors import ToolFailure

ROOT = Path(__file__).resolve().parents[2]
TRAINJOB_CRDS = ROOT / "skills/training_job_deployer/targets/trainjob/crds"
TRAINJOB = TRAINJOB_CRDS / "trainer.kubeflow.org_trainjobs.v2.3.0.yaml.gz"
JOBSET = TRAINJOB_CRDS / "jobset.x-k8s.io_jobsets.v0.12.0.yaml.gz"
PYTORCHJOB = (
    ROOT / "skills/training_job_deployer/targets/kubernetes/crds/kubeflow.org_pytorchjobs.v1.9.yaml"
)
RUNTIMES = TRAINJOB_CRDS / "trainer.kubeflow.org_clustertrainingruntimes.v2.3.0.yaml.gz"
VENDORED = [*sorted(TRAINJOB_CRDS.glob("*.yaml.gz")), PYTORCHJOB]


def torch_distributed(**ml_policy: Any) -> dict[str, Any]:
    """Upstream's torch-distributed ClusterTrainingRuntime (v2.3.0, vendored), `mlPolicy`
    extended by `ml_policy`."""
    with open(TRAINJOB_CRDS / "torch_distributed.v2.3.0.yaml") as handle:
        runtime = yaml.safe_load(handle)
    runtime["spec"]["mlPolicy"].update(ml_policy)
    return runtime


def train_job(**spec: Any) -> dict[str, Any]:
    """A TrainJob as the Kubeflow SDK submits one to the torch-distributed runtime."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llama", "namespace": "default", "labels": {"app": "fsdp"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                "command": ["torchrun"],
                "args": ["-m", "trainer"],
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": "4"}},
            },
            **spec,
        },
    }


def job_set(**spec: Any) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "node", "image": "busybox"}]}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llama"},
        "spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}],
            **spec,
        },
    }


def refusal(obj: dict[str, Any], crd: Path | dict[str, Any], **options: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        cv.validate_against_crd(obj, crd, **options)
    assert caught.value.code == "manifest_invalid"
    return caught.value


def edited(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return out


def test_upstreams_runtime_passes_its_crd_and_its_jobset_template_the_jobset_crd():
    runtime = torch_distributed()
    cv.validate_against_crd(runtime, RUNTIMES)
    jobset = {**job_set(), "spec": runtime["spec"]["template"]["spec"]}
    cv.validate_against_crd(jobset, JOBSET)


def test_a_valid_trainjob_passes_and_is_not_changed():
    job = train_job()
    before = copy.deepcopy(job)
    cv.validate_against_crd(job, TRAINJOB)
    assert job == before  # pruning and defaulting happen on a copy


REFUSED = {
    "a name of 64 characters is refused with upstream's rule message": (
        TRAINJOB, edited(train_job(), "metadata.name", "a" * 64),
        "", "metadata.name must be no more than 63 characters",
    ),
    "a name with an uppercase letter is refused with upstream's RFC 1035 rule message": (
        TRAINJOB, edited(train_job(), "metadata.name", "Llama"),
        "", "metadata.name must match RFC 1035 DNS label format",
    ),
    "a name that starts with a digit is refused by the rule the subdomain check lets through": (
        TRAINJOB, edited(train_job(), "metadata.name", "1llama"),
        "", "metadata.name must match RFC 1035 DNS label format",
    ),
    "managedBy outside the allowed values is refused with upstream's message": (
        TRAINJOB, train_job(managedBy="example.com/mine"),
        "spec.managedBy",
        "ManagedBy must be trainer.kubeflow.org/trainjob-controller or "
        "kueue.x-k8s.io/multikueue if set",
    ),
    "a storageUri without a scheme is refused with upstream's message": (
        TRAINJOB, train_job(initializer={"model": {"storageUri": "bucket/model"}}),
        "spec.initializer.model.storageUri", "storageUri may be empty, or it must be a valid URI",
    ),
    "numNodes given as a string is a type error naming its path": (
        TRAINJOB, edited(train_job(), "spec.trainer.numNodes", "2"),
        "spec.trainer.numNodes", 'in body must be of type integer: "string"',
    ),
    "a runtimeRef without a name is a required error naming its path": (
        TRAINJOB, train_job(runtimeRef={"kind": "ClusterTrainingRuntime"}),
        "spec.runtimeRef.name", "Required value",
    ),
    "an activeDeadlineSeconds below its minimum names the path and the bound": (
        TRAINJOB, train_job(activeDeadlineSeconds=0),
        "spec.activeDeadlineSeconds", "should be greater than or equal to 1",
    ),
    "a JobSet success operator outside its enum is refused with the supported values": (
        JOBSET, job_set(successPolicy={"operator": "Some"}),
        "spec.successPolicy.operator", 'supported values: "All", "Any"',
    ),
    "a JobSet starting in order with dependsOn is refused with upstream's message": (
        JOBSET,
        edited(
            job_set(startupPolicy={"startupPolicyOrder": "InOrder"}),
            "spec.replicatedJobs",
            [
                {"name": "a", "template": {}},
                {"name": "b", "template": {}, "dependsOn": [{"name": "a", "status": "Ready"}]},
            ],
        ),
        "spec", "StartupPolicy and DependsOn APIs are mutually exclusive",
    ),
    "a JobSet volume claim template with a namespace is refused with upstream's message": (
        JOBSET,
        job_set(volumeClaimPolicies=[
            {"templates": [{"metadata": {"name": "ckpt", "namespace": "x"}}]}]),
        "spec.volumeClaimPolicies[0]", "namespace cannot be set for VolumeClaimPolicies templates",
    ),
    "two JobSet replicated jobs of one name break the list-map key": (
        JOBSET,
        edited(job_set(), "spec.replicatedJobs", [{"name": "a", "template": {}}] * 2),
        "spec.replicatedJobs[1]", "Duplicate value",
    ),
    "a runtime with two ML policies is refused with upstream's message": (
        RUNTIMES, torch_distributed(mpi={}),
        "spec.mlPolicy", "Only one of the policy can be configured",
    ),
    "a runtime injecting PET env into other containers may not name the node container": (
        RUNTIMES,
        torch_distributed(torch={"envInjection": {"targets": [
            {"jobName": "node", "containerNames": ["sidecar", "node"]}]}}),
        "spec.mlPolicy.torch.envInjection.targets[0].containerNames",
        "containerNames must not include the main node container",
    ),
    "an unknown field is refused as kubectl's strict field validation refuses it": (
        TRAINJOB, train_job(trainers={"numNodes": 2}),
        "spec.trainers", 'unknown field "spec.trainers"',
    ),
    "a PyTorchJob replica count given as a word is a type error naming its path": (
        PYTORCHJOB,
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "llama"},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": "one", "template": {}}}},
        },
        "spec.pytorchReplicaSpecs[Master].replicas", "must be of type integer",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_object_names_the_path_and_the_reason(case):
    crd, obj, path, words = REFUSED[case]
    failure = refusal(obj, crd)
    problems = failure.details["problems"]
    assert any(p["path"] == path and words in p["problem"] for p in problems), problems
    assert words in failure.message or len(problems) > cv.IN_MESSAGE


def test_a_type_error_stops_the_rules_as_the_api_server_does():
    job = edited(train_job(managedBy="example.com/mine"), "spec.trainer.numNodes", "2")
    problems = refusal(job, TRAINJOB).details["problems"]
    assert not any("ManagedBy must be" in p["problem"] for p in problems)
    assert "some validation rules were not checked" in problems[-1]["problem"]


def test_the_rules_see_defaults_so_an_absent_managed_by_passes():
    validator = cv.crd_validator(TRAINJOB)
    assert not validator.problems(train_job())  # managedBy's default satisfies its rule


def test_an_unknown_field_is_pruned_not_refused_when_asked_to_ignore_it():
    cv.validate_against_crd(
        train_job(trainers={"numNodes": 2}), TRAINJOB, field_validation="Ignore"
    )


def test_status_is_dropped_on_create_so_its_schema_and_rules_do_not_apply():
    status = {"trainerStatus": {"progressPercentage": -5}, "conditions": [{"type": "Created"}]}
    cv.validate_against_crd({**train_job(), "status": status}, TRAINJOB)


def test_an_unknown_field_in_status_is_still_refused_by_a_strict_decode():
    job = {**train_job(), "status": {"progress": 5}}
    problems = refusal(job, TRAINJOB).details["problems"]
    assert problems == [{"path": "status.progress", "problem": 'unknown field "status.progress"'}]


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        ({"apiVersion": None}, "apiVersion", "Required value"),
        ({"apiVersion": "trainer.kubeflow.org/v1"}, "apiVersion", 'supported values: "v1alpha1"'),
        (
            {"apiVersion": "kubeflow.org/v1alpha1"},
            "apiVersion",
            "serves group trainer.kubeflow.org",
        ),
        ({"kind": "PyTorchJob"}, "kind", 'supported values: "TrainJob"'),
    ],
)
def test_an_object_of_another_kind_or_version_is_refused(change, path, words):
    job = {**train_job(), **change}
    problems = refusal(job, TRAINJOB).details["problems"]
    assert problems[0]["path"] == path and words in problems[0]["problem"], problems


def synthetic_crd(rules: list[dict[str, Any]], **props: Any) -> dict[str, Any]:
    """A CRD whose spec carries `rules`: the cases upstream's CRDs do not exercise."""
    spec = {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer", "default": 1},
            "name": {"type": "string"},
            "ratio": {"type": "number"},
            "oldSelf": {"type": "string"},
            **props,
        },
        "x-kubernetes-validations": rules,
    }
    schema = {"type": "object", "properties": {"spec": spec}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def widget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": spec,
    }


RULE_CASES = {
    "an oldSelf rule is not applied on create": (
        [{"rule": "self.replicas == oldSelf.replicas", "message": "replicas is immutable"}],
        widget(name="x"), None,
    ),
    "a rule that only mentions oldSelf in a string still runs": (
        [{"rule": "self.name != 'oldSelf'", "message": "no"}],
        widget(name="oldSelf"), ("spec", "no"),
    ),
    "a field named oldSelf does not make a rule a transition rule": (
        [{"rule": "self.oldSelf == 'x'", "message": "not x"}],
        widget(oldSelf="y"), ("spec", "not x"),
    ),
    "a rule sees the default of an absent field": (
        [{"rule": "self.replicas >= 2", "message": "two at least"}],
        widget(), ("spec", "two at least"),
    ),
    "a rule counts characters, not bytes, as cel-go does": (
        [{"rule": "size(self.name) <= 3", "message": "short"}], widget(name="äöü"), None,
    ),
    "a number field is a double to the rule, whatever the JSON spelling": (
        [{"rule": "self.ratio == 1.0", "message": "one"}], widget(ratio=1), None,
    ),
    "messageExpression words the refusal": (
        [{"rule": "self.replicas < 3",
          "messageExpression": "'too many: ' + string(self.replicas)"}],
        widget(replicas=5), ("spec", "too many: 5"),
    ),
    "a messageExpression that fails falls back to message": (
        [{"rule": "false", "message": "fallback", "messageExpression": "self.nope"}],
        widget(), ("spec", "fallback"),
    ),
    "a rule without message says which rule failed": (
        [{"rule": "self.replicas == 1 && false"}],
        widget(), ("spec", "failed rule: self.replicas == 1 && false"),
    ),
    "fieldPath and reason place and type the refusal": (
        [{"rule": "has(self.name)", "message": "name it", "fieldPath": ".name",
          "reason": "FieldValueRequired"}],
        widget(), ("spec.name", "spec.name: Required value: name it"),
    ),
    "a rule that fails to evaluate is a refusal, not a pass": (
        [{"rule": "self.name == 'x'", "message": "m"}], widget(), ("spec", "evaluating rule: m"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", RULE_CASES)
def test_cel_rules_behave_as_on_the_api_server(case):
    rules, obj, expected = RULE_CASES[case]
    crd = synthetic_crd(rules)
    if expected is None:
        cv.validate_against_crd(obj, crd)
        return
    path, words = expected
    problems = refusal(obj, crd).details["problems"]
    assert [p["path"] for p in problems] == [path]
    assert words in problems[0]["problem"]


SCHEMA_PROPS = {
    "count": {
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
    },
    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
    "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
    "mode": {"type": "string", "nullable": True},
}
SCHEMA_CASES = {
    "an int-or-string takes an integer": (widget(count=4), None),
    "an int-or-string takes a string": (widget(count="50%"), None),
    "an int-or-string refuses a boolean": (widget(count=True), ("spec.count", "integer or string")),
    "a field that preserves unknown fields keeps any content": (widget(free={"a": {"b": 1}}), None),
    "a set refuses a repeated item": (widget(tags=["x", "x"]), ("spec.tags[1]", "Duplicate value")),
    "a map value is checked against additionalProperties": (
        widget(labels={"k": "long"}), ("spec.labels[k]", "Too long: may not be more than 3 bytes"),
    ),
    "a null of a nullable field is kept and passes": (widget(mode=None), None),
    "a null of a non-nullable field is dropped as the server drops it": (widget(name=None), None),
    "a name with a final newline is not a DNS subdomain": (
        {**widget(), "metadata": {"name": "w\n"}}, ("metadata.name", "RFC 1123 subdomain"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", SCHEMA_CASES)
def test_schema_keywords_behave_as_on_the_api_server(case):
    obj, expected = SCHEMA_CASES[case]
    crd = synthetic_crd([], **SCHEMA_PROPS)
    if expected is None:
        cv.validate_against_crd(obj, crd)
        return
    path, words = expected
    problems = refusal(obj, crd).details["problems"]
    assert problems[0]["path"] == path and words in problems[0]["problem"], problems


def test_no_rule_runs_on_a_null_as_the_api_server_skips_it():
    crd = synthetic_crd([{"rule": "self.name == 'x'", "message": "m"}])
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["nullable"] = True
    cv.validate_against_crd({**widget(), "spec": None}, crd)


def test_a_rule_that_does_not_compile_is_refused_when_the_crd_loads():
    with pytest.raises(ToolFailure, match="does not compile"):
        cv.crd_validator(synthetic_crd([{"rule": "self.replicas >", "message": "m"}]))


def test_a_crd_file_is_compiled_once():
    assert cv.crd_validator(TRAINJOB) is cv.crd_validator(str(TRAINJOB))
    assert cv.load_crd(TRAINJOB)["spec"]["names"]["kind"] == "TrainJob"


def sample(schema: Mapping[str, Any], depth: int = 0) -> Any:
    """A value of every declared property (lists of one item), a few levels deep: enough for
    a rule to find the fields it reads."""
    if schema.get("x-kubernetes-int-or-string"):
        return 1
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][-1]
    if kind == "object":
        props = schema.get("properties") or {}
        if depth > 4:
            return {}
        return {key: sample(sub, depth + 1) for key, sub in props.items()}
    if kind == "array":
        items = schema.get("items") or {}
        return [] if depth > 4 else [sample(items, depth + 1)]
    return {"string": "node", "integer": 1, "number": 1.0, "boolean": True}.get(str(kind), {})


@pytest.mark.parametrize("crd", VENDORED, ids=lambda p: p.name)
def test_every_vendored_rule_compiles_and_evaluates_on_a_sample(crd):
    validator = cv.crd_validator(crd)
    text = gzip.decompress(crd.read_bytes()) if crd.suffix == ".gz" else crd.read_bytes()
    # Every rule the file holds was found and compiled (none skipped by the schema walk).
    assert len(validator.rules) == len(re.findall(rb"^\s*(?:- )?rule: ", text, re.M)) > 0
    for schema, rules in validator.nodes:
        value = sample(schema)
        if "metadata" in (schema.get("properties") or {}):
            value["metadata"] = {"name": "sample"}
        activation = {"self": to_cel(value, schema, root=True)}
        for rule in rules:
            if rule.transition:
                activation = {**activation, "oldSelf": activation["self"]}
            verdict = rule.program.evaluate(activation)
            assert isinstance(verdict, bool) or type(verdict).__name__ == "BoolType", rule.rule
