"""Which SASS failures are strong (kopt_core.run.sass_check.is_strong): only the absence of the
instructions a method's own rule requires, never a count relative to the baseline, never a non-failure."""

from __future__ import annotations

import pytest

from kopt_core.run.sass_check import is_strong
from kopt_core.sass.verify import SassVerdict


@pytest.mark.parametrize(
    ("method", "arch", "status", "strong"),
    [
        ("compute.wgmma", "sm_90a", "fail", True),  # an sm_90 rule: HGMMA must be present
        ("memory.smem_tiling", "sm_90a", "fail", True),  # the default rule: LDS/STS must be present
        ("compute.register_tiling", "sm_90a", "fail", False),  # more FFMA than the baseline: a count
        ("latency.divergence_reduction", "sm_90a", "fail", False),  # fewer branches than the baseline
        ("compute.wgmma", "sm_80", "fail", False),  # no rule for sm_80: nothing method-specific failed
        ("compute.wgmma", "sm_90a", "pass", False),
        ("compute.wgmma", "sm_90a", "inconclusive", False),
        ("compute.wgmma", "sm_90a", "tool_error", False),
        ("no.such_method", "sm_90a", "fail", False),
    ],
)
def test_only_a_missing_required_instruction_is_a_strong_failure(method, arch, status, strong):
    assert is_strong(SassVerdict(method=method, status=status), arch) is strong
