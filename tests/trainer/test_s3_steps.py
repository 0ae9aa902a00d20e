"""The one reading of an S3 checkpoint root (trainer.checkpoint_layout.s3_steps), which
resume and export both use: a step is complete only with its COMPLETE marker directly
inside it, against a real S3 API (moto)."""

from __future__ import annotations

import uuid

import boto3
import pytest

from trainer.checkpoint_layout import MARKER, s3_steps

# (keys under the root, what s3_steps reads)
ROOTS = [
    ([], {}),
    ([f"step-2/{MARKER}", "step-2/.metadata", "step-5/.metadata"], {2: True, 5: False}),
    ([f"step-7/sub/{MARKER}", "step-7/.metadata"], {7: False}),  # a marker deeper down
    ([f"other/{MARKER}", f"step-x/{MARKER}", "notes.txt"], {}),  # not step-<N> prefixes
    ([f"step-3/{MARKER}", f"step-10/{MARKER}"], {3: True, 10: True}),  # numbers, not text
]


@pytest.mark.parametrize(("keys", "steps"), ROOTS)
def test_s3_steps(moto_server, keys, steps):
    s3, bucket = boto3.client("s3"), f"steps-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    for key in keys:
        s3.put_object(Bucket=bucket, Key=f"run/{key}", Body=b"x")
    s3.put_object(Bucket=bucket, Key=f"elsewhere/step-9/{MARKER}", Body=b"x")  # not under run/
    assert s3_steps(f"s3://{bucket}/run") == steps
    assert s3_steps(f"s3://{bucket}/run/") == steps
