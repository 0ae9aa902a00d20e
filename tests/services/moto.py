"""AWS stand-in: moto's ThreadedMotoServer on 127.0.0.1 (ECR, IAM, Logs, STS, S3, EKS, ...).

    with moto_server() as aws:
        os.environ.update(aws.env)        # or pass aws.env to a subprocess
        boto3.client("ecr").create_repository(repositoryName="r")
        aws.reset()                       # forget every resource

Clients find it through the standard environment (`AWS_ENDPOINT_URL`), never through
test-only parameters. `env` also points the AWS config/credentials files at paths that do
not exist, so a developer's ~/.aws (profiles, per-service endpoint_url, SSO) cannot leak in
and no test can reach real AWS; `unset` lists variables that must be removed for the same
reason (AWS_PROFILE, AWS_ENDPOINT_URL_<SERVICE>, AWS_IGNORE_CONFIGURED_ENDPOINT_URLS, ...).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCOUNT_ID = "123456789012"  # moto's default account
REGION = "us-east-1"

# Variables that would override or defeat the endpoint/credentials in `env`.
_UNSET = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_CA_BUNDLE",
)


@dataclass
class MotoService:
    endpoint_url: str
    env: dict[str, str]
    unset: tuple[str, ...] = field(default=())
    region: str = REGION
    account_id: str = ACCOUNT_ID

    def reset(self) -> None:
        """Forget every resource in every service (POST /moto-api/reset)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    def ecr_credentials(self) -> tuple[str, str]:
        """(username, password) from ECR get_authorization_token, as `aws ecr get-login-password`.

        moto's token is deterministic (`AWS:<account>-auth-token`) and survives reset()."""
        import boto3

        ecr = boto3.client(
            "ecr",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )
        token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]
        username, _, password = base64.b64decode(token).decode().partition(":")
        return username, password


@functools.cache
def _one_session() -> Any:
    """The boto3 Session moto's EKS asks for its partitions, made once (lazily, as moto
    does: the environment of the first create is the one it reads)."""
    import boto3

    return boto3.Session()


@contextlib.contextmanager
def moto_server(*, load_iam_managed_policies: bool = True) -> Iterator[MotoService]:
    """Run moto on 127.0.0.1:<free port> in a background thread of this process."""
    from moto.core.config import default_user_config
    from moto.server import ThreadedMotoServer

    # Server-side settings of the in-process server (what MOTO_IAM_LOAD_MANAGED_POLICIES=true
    # and mock_aws(config=...) do): AWS-managed policy ARNs resolve; Batch/Lambda never try to
    # start Docker containers. Restored on exit.
    saved = json.loads(json.dumps(default_user_config))
    default_user_config["iam"] = {"load_aws_managed_policies": load_iam_managed_policies}
    default_user_config["batch"] = {"use_docker": False}
    default_user_config["lambda"] = {"use_docker": False}

    import moto.eks.utils

    # moto's EKS checks every cluster's and nodegroup's role ARN against the partitions
    # of a new boto3 Session, which parses botocore's endpoints.json again: ~0.3 CPU-s a
    # create. One session answers the same partitions. Restored on exit.
    eks_session = moto.eks.utils.Session
    moto.eks.utils.Session = _one_session  # type: ignore[assignment]

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        with tempfile.TemporaryDirectory(prefix="fsdp-moto-") as tmp:
            env = {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": REGION,
                "AWS_REGION": REGION,
                # Not created: botocore treats missing files as empty.
                "AWS_CONFIG_FILE": str(Path(tmp) / "config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(Path(tmp) / "credentials"),
                "AWS_EC2_METADATA_DISABLED": "true",
            }
            unset = _UNSET + tuple(
                name for name in os.environ if name.startswith("AWS_ENDPOINT_URL_")
            )
            yield MotoService(endpoint_url=endpoint, env=env, unset=unset)
    finally:
        server.stop()
        moto.eks.utils.Session = eks_session  # type: ignore[assignment]
        default_user_config.clear()
        default_user_config.update(saved)


class FsxAsAws:
    """What `fsx_as_aws_answers` yields: `finish_deletions()` plays the minutes FSx takes
    to delete a file system (with `slow_delete`)."""

    def __init__(self) -> None:
        self.deleting: list[tuple[object, str]] = []  # (backend, file system id)

    def finish_deletions(self) -> None:
        for backend, fs_id in self.deleting:
            backend.file_systems.pop(fs_id, None)  # type: ignore[attr-defined]
        self.deleting.clear()


@contextlib.contextmanager
def fsx_as_aws_answers(*, slow_delete: bool = False) -> Iterator[FsxAsAws]:
    """moto's FSx (5.x) stores a file system but leaves out two fields AWS's answer has:
    `Lifecycle` and the Lustre `MountName` (AWS: "fsx" for SCRATCH_1, else 8 generated
    characters). The in-process server's model fills them as AWS does, for the duration
    (a stand-in's gap, like the kmock patches in tests/services/kube.py).

    `slow_delete`: as AWS, a deleted file system stays DELETING (until
    `finish_deletions()`), and while one names a security group, EC2 refuses to delete
    that group with DependencyViolation (its network interfaces hold it); moto alone
    deletes both at once."""
    from moto.ec2.exceptions import DependencyViolationError
    from moto.ec2.models.security_groups import SecurityGroupBackend
    from moto.fsx import models

    handle = FsxAsAws()
    original = models.FileSystem.to_dict
    original_delete = models.FSxBackend.delete_file_system
    original_delete_group = SecurityGroupBackend.delete_security_group

    def to_dict(self: models.FileSystem) -> dict:
        answer = original(self)
        answer.setdefault("Lifecycle", getattr(self, "lifecycle", "AVAILABLE"))
        lustre = answer.get("LustreConfiguration")
        if isinstance(lustre, dict) and "MountName" not in lustre:
            scratch_1 = lustre.get("DeploymentType") == "SCRATCH_1"
            answer["LustreConfiguration"] = {
                **lustre,
                "MountName": "fsx" if scratch_1 else self.file_system_id[3:11],
            }
        return answer

    def delete_file_system(self: models.FSxBackend, file_system_id: str, *args, **kwargs):
        found = self.file_systems.get(file_system_id)
        answer = original_delete(self, file_system_id, *args, **kwargs)
        if found is not None:  # back in, DELETING, until the test finishes it
            found.lifecycle = "DELETING"  # type: ignore[attr-defined]
            self.file_systems[file_system_id] = found
            handle.deleting.append((self, file_system_id))
        return answer

    def delete_security_group(self, name=None, group_id=None):
        for backend, fs_id in handle.deleting:
            fs = backend.file_systems.get(fs_id)  # type: ignore[attr-defined]
            if fs is not None and group_id in (fs.security_group_ids or ()):
                raise DependencyViolationError(f"resource {group_id} has a dependent object")
        return original_delete_group(self, name=name, group_id=group_id)

    models.FileSystem.to_dict = to_dict
    if slow_delete:
        models.FSxBackend.delete_file_system = delete_file_system
        SecurityGroupBackend.delete_security_group = delete_security_group
    try:
        yield handle
    finally:
        models.FileSystem.to_dict = original
        models.FSxBackend.delete_file_system = original_delete
        SecurityGroupBackend.delete_security_group = original_delete_group
