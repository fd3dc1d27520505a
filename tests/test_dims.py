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
    assert parse_dims('{"M": 2}', ["--M=2"]) == {"M": 2}  # the same value twice is one dim
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
        ('{"M": 1}', ["--M=2"], r'given twice with different values: --dims \{"M": 1\} and --M=2'),
        (None, ["--M=1", "--M=2"], "given twice with different values: --M=1 and --M=2"),
        ('{"M": 1, "M": 2}', [], "given twice in --dims, as 1 and 2"),
    ],
)
def test_bad_dims_are_config_errors(dims_json, args, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_dims(dims_json, args)
    assert info.value.exit_code == 4


# ------------------------------------------------------------------------------ hostile input, fuzzed

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _parses_or_refuses(dims_json, args) -> None:
    """parse_dims returns finite numbers by identifier names, or raises ConfigError: nothing else."""
    try:
        dims = parse_dims(dims_json, args)
    except ConfigError as exc:
        assert exc.exit_code == 4 and exc.message
        return
    for name, value in dims.items():
        assert name.isidentifier() and isinstance(value, (int, float)) and not isinstance(value, bool)
        assert value == value and value not in (float("inf"), float("-inf"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=6))
def test_fuzzed_arguments_parse_or_raise_config_error(args):
    _parses_or_refuses(None, args)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "-", "--", "---"]),
            st.text(max_size=12),
            st.sampled_from(["=", " ", "", "=="]),
            st.one_of(
                st.text(max_size=12),
                st.integers().map(str),
                st.floats().map(repr),
                st.sampled_from(["0x", "1_0", "nan", "-inf", "1e999", "9" * 5000, "0b2", "\x00", "4\n"]),
            ),
        ).map(lambda t: f"{t[0]}{t[1]}{t[2]}{t[3]}"),
        max_size=5,
    )
)
def test_fuzzed_name_value_arguments_parse_or_raise_config_error(args):
    _parses_or_refuses(None, args)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), _JSON.map(lambda v: __import__("json").dumps(v))))
def test_fuzzed_dims_json_parses_or_raises_config_error(text):
    _parses_or_refuses(text, [])


@pytest.mark.parametrize(
    "dims_json, args",
    [
        ('{"N": NaN}', []),
        ('{"N": Infinity}', []),
        ('{"N": 1e999}', []),
        ('{"N": ' + "9" * 5000 + "}", []),
        ("[" * 100000, []),
        ('{"N\\n": 1}', []),
        (None, ["--N=nan"]),
        (None, ["--N=-inf"]),
        (None, ["--N\n=4"]),
    ],
)
def test_non_finite_numbers_and_odd_names_are_refused(dims_json, args):
    with pytest.raises(ConfigError):
        parse_dims(dims_json, args)
