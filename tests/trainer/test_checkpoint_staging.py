"""Issue 23's S3 staging race, examined.

The race as filed: rank 0 deletes a local staging directory that another rank of its
host may still be copying into before the barrier. It cannot happen: only a host's
local rank 0 fetches, copies and renames (Checkpointer._download), the others wait at
the barrier after it, and nothing else writes there.

What the test below found instead: without --output_dir (the Kubernetes target passes
none) every rank staged under its own `mkdtemp`, so on resume local rank 0 downloaded
into its directory and rank 1 loaded from an empty one. The staging root is now one
per host, agreed among the ranks of the host."""

from __future__ import annotations

import uuid

import pytest

from tests.trainer.test_checkpoint_resume import of, torchrun
from tests.trainer.test_trainer_e2e import SMALL, run


@pytest.mark.integration
def test_resume_from_s3_without_output_dir_stages_once_per_host(moto_server, tmp_path):
    import boto3

    bucket = f"stage-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    env = {**moto_server.env, "FSDP_EKS_CACHE_DIR": str(tmp_path / "cache")}
    args = [*SMALL, "--checkpoint_dir", f"s3://{bucket}/ckpt", "--checkpoint_freq", "0"]
    code, events, err = run(torchrun(2, [*args, "--max_steps", "4"]), env)
    assert code == 0, err[-3000:]
    code, resumed, err = run(torchrun(2, [*args, "--max_steps", "6"]), env)
    assert code == 0, err[-3000:]
    assert of(resumed, "checkpoint_loaded")[0]["step"] == 4
    assert of(resumed, "summary")[0]["steps"] == 6
