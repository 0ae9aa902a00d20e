"""Secrets: masked where text is written, refused where they arrive as arguments, and
never carried by an error; a write is opened only by a real true."""

from __future__ import annotations

import contextlib
import io
import json

import anyio
import pytest
from mcp import Client

from commands import tool_spec
from commands._cli import run_cli
from commands.cancel_operation import cancel_operation
from commands.cancel_training_job import cancel_training_job
from commands.deploy_training_job import deploy_training_job
from mcp_server import build_server
from skills.shared.errors import ToolFailure
from skills.shared.secrets import (
    SECRET_ENV_VARS,
    is_secret_name,
    looks_like_secret,
    mask_data,
    redact,
    secret_values,
)

HF = "hf_" + "Zq8" * 12
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SESSION_KEY_ID = "ASIAY34FZKBOKMUTVV7A"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


# --- secret_values ------------------------------------------------------------------


def test_registry_and_ci_tokens_are_secret_variables():
    for name in ("AWS_ACCESS_KEY_ID", "DOCKER_PASSWORD", "REGISTRY_PASSWORD", "CR_PAT",
                 "GITHUB_TOKEN", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY"):  # fmt: skip
        assert name in SECRET_ENV_VARS


def test_secret_values_are_the_long_values_of_secret_variables():
    environ = {"HF_TOKEN": HF, "CR_PAT": "short", "PATH": "/usr/bin:/bin/long/enough"}
    assert secret_values(environ) == (HF,)


# --- redact ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"token {HF} used", "token *** used"),
        (f"key {KEY_ID}, session {SESSION_KEY_ID}", "key ***, session ***"),
        (f"aws_secret_access_key = {SECRET_KEY}", "aws_secret_access_key = ***"),
        (f"AWS_SECRET_ACCESS_KEY={SECRET_KEY} next", "AWS_SECRET_ACCESS_KEY=*** next"),
        (f'{{"aws_secret_access_key": "{SECRET_KEY}"}}', '{"aws_secret_access_key": "***"}'),
        ("Authorization: Bearer eyJhbGci.eyJzdWIi.c2ln", "Authorization: Bearer ***"),
        ("authorization: bearer abc123", "authorization: bearer ***"),
    ],
)
def test_token_shapes_are_masked_without_being_told_the_values(text, masked):
    assert redact(text, values=()) == masked


def test_ordinary_text_is_left_alone():
    line = '{"event": "step", "step": 10, "loss": 2.5, "path": "/data/AKIA/hf_small"}'
    assert redact(line, values=()) == line
    assert redact("AKIAIOSFODNN7EXAMPLEXX is a longer word", values=()).startswith("AKIA")


def test_given_values_are_masked_longest_first_and_empty_ones_ignored():
    assert redact("a secret-value-long here", ["secret-value", "secret-value-long", ""]) == (
        "a *** here"
    )


def test_a_short_value_inside_a_token_does_not_keep_the_token_visible():
    assert redact(f"x {HF} y", ["Zq8Zq8"]) == "x *** y"


def test_none_means_this_environments_secrets(monkeypatch):
    monkeypatch.setenv("REGISTRY_PASSWORD", "hunter2-registry")
    assert redact("login with hunter2-registry") == "login with ***"
    assert redact("login with hunter2-registry", values=()) == "login with hunter2-registry"


# --- looks_like_secret ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        HF,
        f"https://user:{HF}@huggingface.co/x",
        KEY_ID,
        SECRET_KEY,
        "Bearer x Authorization: Bearer y",
    ],
)
def test_tokens_look_like_secrets(value):
    assert looks_like_secret(value)


@pytest.mark.parametrize(
    "value",
    [
        "runs",
        "HuggingFaceFW/fineweb-edu",
        "meta-llama/Llama-3.1-8B",
        "s3://bucket/datasets/tokenized/shard-00001-of-00128",
        "/very/long/absolute/path/to/a/datasetX1",  # 40 chars, but a path
        "datasets/wikitext/wikitext103rawv1train",  # 40 chars, no digits, no upper case
        "a" * 40,
        "x" * 5000,
        "hf_short",
        "AKIA",
    ],
)
def test_ordinary_names_and_paths_do_not(value):
    assert not looks_like_secret(value)


# --- errors never carry secrets -----------------------------------------------------------


def test_a_failure_masks_message_hint_and_details_on_every_path(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_canary_value_1234")
    failure = ToolFailure(
        "access_denied",
        f"denied for {KEY_ID}",
        "retry with ghp_canary_value_1234",
        {"cmd": ["login", "-p", HF], f"with {HF}": 1, "n": 3},
    )
    shown = [str(failure), repr(failure), *map(str, failure.args), json.dumps(failure.to_dict())]
    for text in shown:
        assert KEY_ID not in text and HF not in text and "ghp_canary" not in text
    assert failure.details == {"cmd": ["login", "-p", "***"], "with ***": 1, "n": 3}
    failure.message = f"later {HF}"  # set after the fact: still masked
    assert failure.message == "later ***"
    assert ToolFailure.from_dict(failure.to_dict()).message == "later ***"


# --- tokens are not arguments ------------------------------------------------------------


def _refused(failure: ToolFailure, field: str, value: str) -> None:
    assert failure.code == "invalid_input"
    assert failure.message.startswith(f"{field} looks like a secret token")
    assert "environment" in failure.hint and "HF_TOKEN" in failure.hint
    assert value not in json.dumps(failure.to_dict())


@pytest.mark.parametrize(
    ("raw", "field", "value"),
    [
        ({"job_name": "j", "tokenizer": HF}, "tokenizer", HF),
        ({"job_name": "j", "dataset": SECRET_KEY}, "dataset", SECRET_KEY),
        ({"job_name": "j", "runs_dir": f"/tmp/{KEY_ID}"}, "runs_dir", KEY_ID),
        # Not fields of the tool: refused as tokens all the same, before validation.
        ({"job_name": "j", "extra": {"deep": [SECRET_KEY]}}, "extra.deep[0]", SECRET_KEY),
        ({"job_name": "j", SECRET_KEY: 1}, "a key of the arguments", SECRET_KEY),
    ],
)
def test_a_token_in_any_argument_is_refused_without_echoing_it(raw, field, value):
    with pytest.raises(ToolFailure) as caught:
        tool_spec("deploy_training_job").parse(raw)
    _refused(caught.value, field, value)


def test_python_callers_are_refused_too(tmp_path):
    with pytest.raises(ToolFailure) as caught:
        deploy_training_job(job_name="j", runs_dir=str(tmp_path), dry_run=True, tokenizer=HF)
    _refused(caught.value, "tokenizer", HF)


def _cli(fn, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = run_cli(fn, list(argv))
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
    return status, out.getvalue(), err.getvalue()


def test_the_cli_refuses_a_token_with_exit_2(tmp_path):
    status, out, err = _cli(deploy_training_job, "--job_name", "j", "--runs_dir",
                            str(tmp_path), "--dry_run", "--json", "--dataset", HF)  # fmt: skip
    assert status == 2
    _refused(ToolFailure.from_dict(json.loads(out)), "dataset", HF)
    assert HF not in err


def test_a_token_in_a_usage_error_is_masked(tmp_path):
    status, out, err = _cli(deploy_training_job, "--job_name", "j", "--json", HF)
    assert status == 2 and "unrecognized arguments: ***" in out
    assert HF not in out + err


def _mcp(calls: list[tuple[str, dict]]) -> list:
    async def scenario():
        async with Client(build_server()) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(scenario)


def test_mcp_refuses_a_token_as_a_typed_error(tmp_path):
    (result,) = _mcp([("deploy_training_job", {"job_name": "j", "runs_dir": str(tmp_path),
                                               "dry_run": True, "tokenizer": HF})])  # fmt: skip
    assert result.is_error
    _refused(ToolFailure.from_dict(json.loads(result.content[0].text)), "tokenizer", HF)


# --- writes need a real true ------------------------------------------------------------


@pytest.mark.parametrize("confirm", ["true", "True", 1, "1", "yes", 1.0])
def test_confirm_must_be_a_real_true_over_mcp(tmp_path, confirm):
    results = _mcp(
        [
            (
                "cancel_training_job",
                {"job_name": "j", "runs_dir": str(tmp_path), "confirm": confirm},
            ),
            (
                "cancel_operation",
                {"operation_id": "deploy_training_job-20250101-120000-abcdef", "confirm": confirm},
            ),
        ]
    )
    for result in results:
        error = json.loads(result.content[0].text)["error"]
        assert result.is_error and error["code"] == "invalid_input", error
        assert error["details"]["problems"][0]["field"] == "confirm"


def test_confirm_true_over_mcp_reaches_the_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    results = _mcp(
        [
            ("cancel_training_job", {"job_name": "j", "runs_dir": str(tmp_path), "confirm": True}),
            (
                "cancel_operation",
                {"operation_id": "deploy_training_job-20250101-120000-abcdef", "confirm": True},
            ),
        ]
    )
    codes = [json.loads(r.content[0].text)["error"]["code"] for r in results]
    assert codes == ["job_not_found", "operation_not_found"]


def test_the_cli_confirm_flag_still_works(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    cancelled = _cli(cancel_training_job, "--job_name", "j", "--runs_dir", str(tmp_path),
                     "--confirm")  # fmt: skip
    assert cancelled[0] == 2 and "job_not_found" in cancelled[2]
    stopped = _cli(
        cancel_operation,
        "--operation_id",
        "deploy_training_job-20250101-120000-abcdef",
        "--confirm",
    )
    assert stopped[0] == 2 and "operation_not_found" in stopped[2]
    unconfirmed = _cli(cancel_training_job, "--job_name", "j", "--runs_dir", str(tmp_path),
                       "--no-confirm")  # fmt: skip
    assert unconfirmed[0] == 2 and "confirmation_required" in unconfirmed[2]


# --- issue 20: more token shapes, named secrets, records, secret names ------------------

GITHUB = "ghp_" + "R2d" * 12
WANDB = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            f"https://x-access-token:{GITHUB}@github.com/a/b",
            "https://x-access-token:***@github.com/a/b",
        ),
        ("github_pat_" + "A1_" * 10 + " rest", "*** rest"),
        (f"WANDB_API_KEY={WANDB} wandb login", "WANDB_API_KEY=*** wandb login"),
        (f'{{"wandb_api_key": "{WANDB}"}}', '{"wandb_api_key": "***"}'),
        ("password: hunter2hunter2", "password: ***"),
        ("Authorization: Basic QVdTOnNlY3JldA==", "Authorization: Basic ***"),
        ("aws_session_token = IQoJb3JpZ2luX2VjEJr", "aws_session_token = ***"),
    ],
)
def test_github_tokens_and_named_secrets_are_masked(text, masked):
    assert redact(text, values=()) == masked


def test_git_shas_and_digests_are_not_taken_for_secrets():
    line = f"commit {WANDB} digest sha256:{'a' * 64}"
    assert redact(line, values=()) == line


def test_mask_data_masks_every_string_at_any_depth_keys_included():
    data = {"argv": ["--dataset", f"s3://b/{HF}"], HF: 1, "n": 2, "t": ("x", KEY_ID)}
    assert mask_data(data, values=()) == {"argv": ["--dataset", "s3://b/***"], "***": 1,
                                          "n": 2, "t": ("x", "***")}  # fmt: skip
    assert mask_data(["a planted-value-long"], values=["planted-value-long"]) == ["a ***"]


@pytest.mark.parametrize(
    ("name", "secret"),
    [("GITHUB_TOKEN", True), ("WANDB_API_KEY", True), ("NPM_TOKEN", True), ("DB_PASSWORD", True),
     ("MY_SECRET_VALUE", True), ("SIGNING_KEY", True), ("CR_PAT", True), ("HF_TOKEN", True),
     ("TEST_LEVEL", False), ("AWS_REGION", False), ("ECR_REPOSITORY", False),
     ("TAG_STRATEGY", False), ("MONKEY", False), ("CUDA_VISIBLE_DEVICES", False)],
)  # fmt: skip
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret
