"""The registry and podman's Docker API that the image benchmarks (ecr_push,
image_rebuild) push and build through: started here as the test fixtures start them
(`make bench`), or, with `--services-in-env` (the quick-mode test passes it), the ones the
test session already runs, found through the standard environment they set
(AWS_ENDPOINT_URL: moto, whose ECR token is the registry's password;
FSDP_EKS_ECR_REGISTRY_HOST: the registry; DOCKER_HOST: podman's socket). Starting moto,
the registry and podman is seconds of a quick run, and the session has them anyway."""

from __future__ import annotations

import base64
import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.services.moto import moto_server
from tests.services.podman import podman_service
from tests.services.registry import RegistryService, registry_server

IN_ENV = "--services-in-env" in sys.argv


@dataclass(frozen=True)
class Services:
    registry: RegistryService
    engine_storage: Path  # podman's --root is engine_storage/"root" (tests/services/podman.py)


def _in_env() -> Services:
    names = ("AWS_ENDPOINT_URL", "FSDP_EKS_ECR_REGISTRY_HOST", "DOCKER_HOST")
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        sys.exit(f"--services-in-env: {', '.join(missing)} not set")
    import boto3

    from skills.cloud.registry_credentials import ecr_login

    # moto's ECR token is the registry's password, as `aws ecr get-login-password` gives it
    login = ecr_login(boto3.client("ecr", endpoint_url=os.environ["AWS_ENDPOINT_URL"]))
    user, password = login.username, login.password
    host = os.environ["FSDP_EKS_ECR_REGISTRY_HOST"]  # localhost:PORT
    port = int(host.rpartition(":")[2])
    registry = RegistryService(host=host, url=f"http://127.0.0.1:{port}", port=port,
                               username=user, password=password, storage=Path())  # fmt: skip
    socket = Path(os.environ["DOCKER_HOST"].removeprefix("unix://"))
    return Services(registry=registry, engine_storage=socket.parent)


@contextlib.contextmanager
def services(with_aws: bool) -> Iterator[Services]:
    """The registry (user AWS; with_aws: moto's ECR token as its password, and moto in the
    environment) and podman (trusting it as insecure), in the environment until the block
    exits."""
    if IN_ENV:
        yield _in_env()
        return
    with contextlib.ExitStack() as stack:
        if with_aws:
            aws = stack.enter_context(moto_server())
            os.environ.update(aws.env)
            for name in aws.unset:
                os.environ.pop(name, None)
            user, password = aws.ecr_credentials()
        else:
            user, password = "AWS", base64.b16encode(os.urandom(12)).decode()
        registry = stack.enter_context(registry_server(username=user, password=password))
        engine = stack.enter_context(podman_service(insecure_registries=[registry.host]))
        os.environ.update(engine.env)
        if with_aws:  # the registry plays ECR's data plane, named as a user names theirs
            # (as the test fixture does): the one host besides ECR's own the token may go to
            os.environ["FSDP_EKS_ECR_REGISTRY_HOST"] = registry.host
        yield Services(registry=registry, engine_storage=engine.root.parent)
