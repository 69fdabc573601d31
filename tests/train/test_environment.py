"""The environment's 0/1 flags win over a script's argument; anything else is named."""

from __future__ import annotations

import pytest

from trainguard.train import environment


@pytest.mark.parametrize(("environ", "argument", "expected"), [
    ({}, None, None), ({}, True, True), ({"FLAG": "0"}, True, False),
    ({"FLAG": "1"}, False, True), ({"FLAG": "1"}, None, True),
])
def test_the_variable_wins_when_set(environ: dict[str, str], argument: bool | None,
                                    expected: bool | None) -> None:
    assert environment.flag("FLAG", argument, environ=environ) is expected


@pytest.mark.parametrize("value", ["", "true", "yes", " 1"])
def test_a_value_other_than_0_or_1_is_named(value: str) -> None:
    with pytest.raises(ValueError, match=f"FLAG must be 0 or 1, got {value!r}"):
        environment.flag("FLAG", True, environ={"FLAG": value})
