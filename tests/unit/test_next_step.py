from skills.shared.errors import ToolFailure
from skills.shared.next_step import NextStep


def test_cli_line_spells_each_kind_of_argument_as_the_cli_parses_it():
    step = NextStep(
        tool="build_image",
        arguments={
            "base_image": "a b",
            "push": True,
            "no_cache": False,
            "build_args": {"X": "1"},
            "skip": None,
            "tags": ["t1", "t2"],
        },
    )
    assert step.cli_line() == (
        "build-image --base_image 'a b' --push --no-no-cache --build_args X=1 --tags t1 --tags t2"
    )


def test_a_failure_carries_its_next_step_through_its_dict():
    step = NextStep(
        tool="push_to_ecr", arguments={"image": "x:1", "confirm": True}, why="move the tag"
    )
    failure = ToolFailure("confirmation_required", "m", "h", next_step=step)
    again = ToolFailure.from_dict(failure.to_dict())
    assert again.next_step == step
    assert "next_step" not in ToolFailure("invalid_input", "m").to_dict()["error"]
