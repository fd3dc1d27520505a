"""The brief's table of the profiled program's kernels (a PyTorch forward runs one kernel per operator):
summed by name, longest first, each with its share of the program's time."""

from __future__ import annotations

import math

from kopt_core.generate.brief import _kernels, _md_kernels
from kopt_core.jsonio import write_json
from kopt_core.records import to_data
from kopt_core.records.profile import ProfiledKernel, ProfileSummary


def write_profile(folder, kernels):
    summary = ProfileSummary(
        report="r.ncu-rep", bundle="full", bundle_reason="", kernels=kernels, ncu_duration_ms=None
    )
    write_json(folder / "profile.json", to_data(summary))


def test_kernels_are_summed_by_name_sorted_by_time_and_given_their_share(tmp_path):
    write_profile(
        tmp_path,
        [
            ProfiledKernel(0, "vectorized_elementwise_mul", 0.05),
            ProfiledKernel(1, "sigmoid_kernel", 0.30),
            ProfiledKernel(2, "vectorized_elementwise_mul", 0.10),
        ],
    )
    kernels = _kernels(tmp_path)
    assert [(k.name, k.launches) for k in kernels] == [
        ("sigmoid_kernel", 1),
        ("vectorized_elementwise_mul", 2),
    ]
    assert math.isclose(kernels[1].duration_ms, 0.15) and math.isclose(kernels[0].share, 2 / 3)
    assert math.isclose(sum(k.share for k in kernels), 1.0)


def test_a_kernel_with_an_unknown_duration_has_no_share_and_one_kernel_gives_no_table(tmp_path):
    write_profile(tmp_path, [ProfiledKernel(0, "a", 0.2), ProfiledKernel(1, "b", None)])
    kernels = {k.name: k for k in _kernels(tmp_path)}
    assert kernels["b"].duration_ms is None and kernels["b"].share is None
    assert math.isclose(kernels["a"].share, 1.0)
    write_profile(tmp_path, [ProfiledKernel(0, "a", 0.2)])
    assert _kernels(tmp_path) == ()
    assert _kernels(tmp_path / "missing") == ()


def test_the_markdown_table_lists_each_kernel_with_its_share(tmp_path):
    from kopt_core.generate.brief import BriefKernel

    class Stub:
        kernels = (BriefKernel("big", 1, 0.75, 0.75), BriefKernel("small", 3, 0.25, 0.25))

    text = _md_kernels(Stub())
    assert "| `big` | 1 | " in text and "| 75% |" in text and "| `small` | 3 |" in text
    Stub.kernels = ()
    assert _md_kernels(Stub()) == ""
