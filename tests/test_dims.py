from __future__ import annotations

import pytest

from kopt_core.dims import parse_dims
from kopt_core.errors import ConfigError


def test_seed_spelling_and_json_merge():
    assert parse_dims('{"M": 4096, "alpha": 0.5}', ["--N=2048", "--K", "1_024"]) == {
        "M": 4096,
        "alpha": 0.5,
        "N": 2048,
        "K": 1024,
    }
    assert parse_dims('{"M": 1}', ["--M=2"]) == {"M": 2}  # the command line wins
    assert parse_dims(None, ["--N=0x100"]) == {"N": 256}


@pytest.mark.parametrize(
    "dims_json, args, message",
    [
        ("{bad", [], "not valid JSON"),
        ("[1, 2]", [], "JSON object"),
        (None, ["--N=abc"], "not a number"),
        (None, ["--N"], "has no value"),
        (None, ["N=4"], "unexpected argument"),
        (None, ["--1N=4"], "identifier"),
        ('{"N": true}', [], "boolean"),
    ],
)
def test_bad_dims_are_config_errors(dims_json, args, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_dims(dims_json, args)
    assert info.value.exit_code == 4
