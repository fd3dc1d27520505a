"""A launcher factory gets the reference's path only when it asks for it (kopt_core.bench.launchers)."""

from __future__ import annotations

import functools

from kopt_core.bench.launchers import make_launcher, takes_reference


def one(artifact):
    return ("one", artifact)


def keyword(artifact, *, reference):
    return ("keyword", artifact, reference)


def defaulted(artifact, reference=""):
    return ("defaulted", artifact, reference)


def anything(artifact, **options):
    return ("anything", artifact, options)


def test_only_a_factory_that_names_reference_or_takes_any_keyword_gets_it():
    assert [takes_reference(f) for f in (one, keyword, defaulted, anything)] == [False, True, True, True]
    assert make_launcher(one, "A", "ref.py") == ("one", "A")
    assert make_launcher(keyword, "A", "ref.py") == ("keyword", "A", "ref.py")
    assert make_launcher(defaulted, "A") == ("defaulted", "A", "")
    assert make_launcher(anything, "A", "ref.py") == ("anything", "A", {"reference": "ref.py"})


def test_a_factory_whose_signature_cannot_be_read_is_called_with_the_artifact_alone():
    assert takes_reference(functools.partial(keyword)) is True
    assert takes_reference(dict) is False  # inspect.signature(dict) raises ValueError
    assert make_launcher(list, "AB", "ref.py") == ["A", "B"]  # called without the keyword
