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
import json
import os
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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
        default_user_config.clear()
        default_user_config.update(saved)
