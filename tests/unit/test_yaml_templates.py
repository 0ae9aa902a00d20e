"""Every value a manifest template writes (through tojson) reads back exactly as YAML:
characters beyond the BMP included (JSON's surrogate-pair escapes read as two lone
surrogates in YAML, which no JSON or UTF-8 writer takes: the fuzz found a model name of
U+10000 breaking deploy_model_server's dry run)."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st

from commands.deploy_model_server import deploy_model_server
from skills.shared.templates import yaml_json

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(values)
def test_any_value_reads_back_as_itself(value):
    assert yaml.safe_load(yaml_json(value)) == value


def test_a_character_beyond_the_bmp_is_one_yaml_escape():
    assert yaml_json("a\U00010000b\U0001f600") == '"a\\U00010000b\\U0001f600"'
    assert yaml.safe_load(yaml_json({"k": "\U0010ffff"})) == {"k": "\U0010ffff"}


def test_a_model_name_beyond_the_bmp_is_the_same_name_in_the_plan(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    result = deploy_model_server(
        name="wide", model="m\U00010000", target="kubernetes", model_claim="c", dry_run=True
    )
    assert result.plan is not None
    deployment = result.plan.objects[0]
    assert deployment["metadata"]["annotations"]["fsdp-eks/model"] == "m\U00010000"
    assert result.model_dump_json()  # serialisable: no lone surrogates
