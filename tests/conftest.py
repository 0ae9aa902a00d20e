"""Session fixtures for real local services (logic in tests/services/).

Lazy: a service starts only when a test asks for its fixture. While it runs, the standard
environment points at it (AWS_ENDPOINT_URL..., DOCKER_HOST, KUBECONFIG), so product code
finds it exactly as it would find a user's endpoints; the environment is restored after.
A missing system binary skips the test, except under CI=true, where it fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import pytest

from tests import file_order, run_copies
from tests.services import kube, moto, podman, standin_base
from tests.services import registry as registry_service
from tests.services import slurm as slurm_service
from tests.services._common import require as _require
from tests.services.eks_extras import EksExtras
from tests.services.eks_extras import eks_extras as eks_extras_server

if TYPE_CHECKING:
    from tests.services import trainer_v2 as trainer_v2_service

# Under xdist (`make test` runs pytest -n auto --dist loadfile) each worker is its own
# session and starts the services its files ask for: every service takes free ports and
# private paths (Slurm also a random first job id, see services/slurm.py), so workers and
# parallel sessions on one host never share or collide.

# One intra-op thread per test process, inherited by the jobs, ranks and servers the tests
# start (unless they set their own): `make test` runs a worker per core, so a second
# thread in a process only waits for a core that the other worker holds. Measured on
# the mp.spawn trainer tests (test_global_loss, test_meta_init): 27% less CPU. The
# trainer's own choice without the variable (split the cores) is unit-tested.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Tests that run real jobs on a local Slurm (seconds to a minute each), or build and run
# the trainer image on a stand-in base (minutes; the base's first build on a machine more).
SLOW_FIXTURES = {"slurm_cluster", "standin_bases"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if set(getattr(item, "fixturenames", ())) & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
    # Longest files first (tests/file_order.py); xdist hands them out in this order
    # (--no-loadscope-reorder in pyproject's addopts).
    cache = getattr(config, "cache", None)
    timed = cache.get(file_order.CACHE_KEY, {}) if cache is not None else {}
    order = file_order.longest_first([item.nodeid for item in items], timed)
    items[:] = [items[i] for i in order]


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each file's seconds (setup, call, teardown): in the controller under xdist."""
    path = file_order.file_of(report.nodeid)
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The files this session ran, timed, over what the cache knew (not in a worker)."""
    cache = getattr(session.config, "cache", None)
    if hasattr(session.config, "workerinput") or cache is None or not _FILE_SECONDS:
        return
    known = cache.get(file_order.CACHE_KEY, {})
    cache.set(file_order.CACHE_KEY,
              {**known, **{path: round(s, 1) for path, s in _FILE_SECONDS.items()}})  # fmt: skip


@contextlib.contextmanager
def _environment(env: Mapping[str, str], unset: Iterable[str] = ()) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in unset:
            patch.delenv(name, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="session")
def moto_server() -> Iterator[moto.MotoService]:
    """moto on 127.0.0.1; AWS_ENDPOINT_URL, fake credentials and us-east-1 in the env."""
    with moto.moto_server() as aws, _environment(aws.env, aws.unset):
        yield aws


@pytest.fixture(scope="session")
def eks_extras(moto_server: moto.MotoService) -> Iterator[EksExtras]:
    """EKS add-ons and Pod Identity associations (which moto lacks) in front of moto's
    EKS: AWS_ENDPOINT_URL_EKS in the env (tests/services/eks_extras.py)."""
    with eks_extras_server(moto_server.endpoint_url) as extras, _environment(extras.env):
        yield extras


@pytest.fixture(scope="session")
def registry(moto_server: moto.MotoService) -> Iterator[registry_service.RegistryService]:
    """docker-registry on localhost:PORT; user AWS, password = moto's ECR token. It plays
    ECR's data plane, named as a user names theirs: FSDP_EKS_ECR_REGISTRY_HOST in the env
    (the one host besides the account's ECR host that the ECR token may go to)."""
    _require(registry_service.check)
    username, password = moto_server.ecr_credentials()
    with (
        registry_service.registry_server(username=username, password=password) as reg,
        _environment({"FSDP_EKS_ECR_REGISTRY_HOST": reg.host}),
    ):
        yield reg


@pytest.fixture(scope="session")
def docker_api(registry: registry_service.RegistryService) -> Iterator[podman.PodmanService]:
    """podman's Docker API; DOCKER_HOST in the env; `registry` is an insecure registry."""
    _require(podman.check)
    with (
        podman.podman_service(insecure_registries=[registry.host]) as engine,
        _environment(engine.env, engine.unset),
    ):
        yield engine


@pytest.fixture(scope="session")
def kube_api() -> Iterator[kube.KubeService]:
    """kmock Kubernetes API; KUBECONFIG (context "kmock") in the env."""
    with kube.kube_server() as cluster, _environment(cluster.env):
        yield cluster


@pytest.fixture(autouse=True)
def _no_cluster_unless_asked(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[None]:
    """A test that asks for no cluster gets none: `kube_api` is session-scoped, so once a
    test in this worker started kmock, KUBECONFIG would stay set for every later test, and
    a dry run with engine=auto would ask it which engine it serves (whichever kind the last
    test left it serving). Here KUBECONFIG names no file, as on a laptop with no cluster."""
    if "kube_api" in request.fixturenames:
        yield
        return
    with _environment({"KUBECONFIG": str(tmp_path_factory.getbasetemp() / "no-kubeconfig")}):
        yield


@pytest.fixture
def trainer_v2(kube_api: kube.KubeService, tmp_path) -> Iterator[trainer_v2_service.TrainerV2]:
    """kmock (reset) serving Kubeflow Trainer v2.3.0 and JobSet v0.12.0 (not the v1
    PyTorchJob kind) with their controllers played by tests/services/trainer_v2.py, its
    pods running under tmp_path/cluster; every container stopped after the test."""
    from tests.services import trainer_v2 as service  # the kubernetes client: only when used

    with service.cluster(kube_api, tmp_path / "cluster") as trainer:
        yield trainer


@pytest.fixture
def trainer_v2_progress(
    kube_api: kube.KubeService, tmp_path
) -> Iterator[trainer_v2_service.TrainerV2]:
    """As `trainer_v2`, with the TrainJobStatus feature gate on: the status server
    stand-in (tests/services/trainer_status.py, `.status_server`) serves the pods, and
    what the trainer posts lands in TrainJob.status.trainerStatus."""
    from tests.services import trainer_v2 as service

    with service.cluster(kube_api, tmp_path / "cluster", progress=True) as trainer:
        yield trainer


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[slurm_service.SlurmCluster]:
    """A one-node Slurm (munged, slurmctld, slurmd; private paths); SLURM_CONF in the env."""
    _require(slurm_service.check)
    with slurm_service.slurm_cluster() as cluster, _environment(cluster.env):
        yield cluster


@pytest.fixture(scope="session")
def standin_bases() -> Callable[..., standin_base.StandinBase]:
    """standin_bases(name, torch=VERSION): a stand-in of the base image `name` in a podman
    image store kept per machine (built once, minutes; see services/standin_base.py)."""
    _require(standin_base.check)
    _require(podman.check)
    return standin_base.standin_base


@pytest.fixture(scope="session", autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The tools' state (operations, the remembered ECR repository) goes to a directory of
    this session, never the user's ~/.local/state; a test that needs its own sets
    FSDP_EKS_STATE_DIR itself (monkeypatch wins over this)."""
    if os.environ.get("FSDP_EKS_STATE_DIR"):
        yield
        return
    with _environment({"FSDP_EKS_STATE_DIR": str(tmp_path_factory.mktemp("state"))}):
        yield


@pytest.fixture(scope="session")
def ended_job(tmp_path_factory: pytest.TempPathFactory) -> run_copies.EndedJob:
    """One real local job run to its end, shared by every test of this worker that only
    needs an ended job (tests/run_copies.py: read it, or change a copy)."""
    return run_copies.end_a_job(tmp_path_factory.mktemp("ended"))
