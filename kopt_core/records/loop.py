"""The documents of one closed iteration (docs/loop.md, steps 3d-3j): what a generator wrote
(candidates.json), what explore found (explore.json), what each method is worth (attribution.json) and
whether the champion's machine code shows it (sass_check.json).

Each is written once, atomically, by the step that owns it, and read back by the steps after it, so every
record carries a ``schema_version`` and reads strictly (``read_*`` below). The update step
(``kopt_core.run.update``) turns the last three, with the promotion's paired.json, into state.json.

Unknown stays unknown: a check that did not run is None, an ablation that could not be measured is
"inconclusive", never a zero.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from attrs import field, frozen

from kopt_core.records.fields import as_tuple
from kopt_core.records.paired import AblationEffect
from kopt_core.records.versions import (
    ATTRIBUTION_SCHEMA_VERSION,
    CANDIDATES_SCHEMA_VERSION,
    EXPLORE_SCHEMA_VERSION,
    SASS_CHECK_SCHEMA_VERSION,
    read_document,
)

AttributionStatus = Literal["measured", "inconclusive"]
# The vocabulary of kopt_core.sass.verify (SassVerdict.status, STATUSES): one set of SASS verdicts, whether
# ``kopt sass`` checks a loose file or the run checks a champion. A test keeps the two equal. (A plain str
# checked against it, as SassVerdict.status is a str that a verdict is copied from.)
SASS_STATUSES = ("pass", "fail", "inconclusive", "not_applicable", "tool_error")


# --------------------------------------------------------------------------------------- candidates.json


@frozen
class BranchSpec:
    """One branch kernel a generator wrote. Every branch carries the iteration's methods; branches differ
    only in hyperparameters and implementation details (spec step 3d)."""

    id: str  # "b1" .. "bK"
    file: str  # relative to the iteration folder: "branches/b1/kernel.cu"
    methods: tuple[str, ...] = field(converter=as_tuple)
    hyperparameters: dict[str, Any] = field(factory=dict)  # {"BLOCK_M": 128, "num_stages": 3, ...}
    note: str = ""


@frozen
class AblationSpec:
    """The champion's design with one method rolled back: what the method is worth is measured against
    it (spec step 3h)."""

    method: str
    file: str  # relative to the iteration folder: "ablations/<method>/kernel.cu"
    note: str = ""


@frozen
class Candidates:
    """iterv{i}/candidates.json: the kernels of one iteration, written by whoever wrote them (an agent, a
    script) and checked by ``kopt_core.run.candidates.load_candidates`` before anything is built. A method
    without an ablation is allowed: its attribution is then inconclusive."""

    iteration: int
    generator: str  # who wrote the kernels, e.g. "claude" or "autotune-script 1.2"
    methods: tuple[str, ...] = field(converter=as_tuple)  # the iteration's methods (methods.json)
    branches: tuple[BranchSpec, ...] = field(converter=as_tuple)
    ablations: tuple[AblationSpec, ...] = field(default=(), converter=as_tuple)
    schema_version: int = CANDIDATES_SCHEMA_VERSION


# ------------------------------------------------------------------------------------------ explore.json


@frozen
class BranchOutcome:
    """One explored branch. Each gate is its own field, so a failure says which gate failed; a branch
    that failed an earlier gate keeps False (not run) for the later ones."""

    id: str
    file: str  # relative to the iteration folder
    compile_pass: bool = False
    contract_pass: bool = False
    correctness_pass: bool = False
    race_safe: bool | None = None  # None: not checked (race_note says why); False fails the branch
    race_note: str = ""
    timing_valid: bool = False
    median_ms: float | None = None
    robust_cv: float | None = None  # 1.4826 * MAD / median of the timed samples
    requested_dims: dict[str, Any] = field(factory=dict)
    realised_dims: dict[str, Any] = field(factory=dict)  # the dims the worker ran with
    # buffer name -> shape: what the reference asked for, and what the harness allocated
    requested_shapes: dict[str, list[int]] = field(factory=dict)
    realised_shapes: dict[str, list[int]] = field(factory=dict)
    error: str | None = None
    error_stage: str | None = None  # contract | compile | correctness | timing | a sanitizer tool | ...
    violation: str | None = None  # why its check or timing failed (records.bench.VIOLATIONS)
    bench: str | None = None  # its bench.json, relative to the iteration folder
    build_seconds: float | None = None
    cache_hit: bool = False  # the build came from the run's build cache (never a timing cache)
    bench_seconds: float | None = None  # wall time of its check and timing in the worker
    race_seconds: float | None = None  # wall time of its compute-sanitizer runs (None: none ran)
    # the executor's slot that timed it (the ranking worker's; "" before executors), and with several
    # workers the one that screened it first (its check and a first timing, never compared across slots)
    timed_on: str = ""
    screened_on: str = ""

    @property
    def failure(self) -> str:
        """Why the branch failed, in one line ("correctness: seed 0: ..."), or "" when it did not."""
        lines = (self.error or "").strip().splitlines()
        return f"{self.error_stage}: {lines[0]}" if lines else ""

    @property
    def passed(self) -> bool:
        """Every strict gate passed; a race check that could not run (None) does not fail a branch."""
        return (
            self.compile_pass
            and self.contract_pass
            and self.correctness_pass
            and self.timing_valid
            and self.race_safe is not False
        )


@frozen
class ExploreRecord:
    """iterv{i}/explore.json: every branch's outcome and the champion, the fastest passing branch (ties
    by branch index). The champion only becomes the run's best on a paired win (paired.json)."""

    iteration: int
    branches: tuple[BranchOutcome, ...] = field(converter=as_tuple)
    champion: str | None = None  # a branch id; None: no branch passed (the run stops, exit 2)
    champion_ms: float | None = None
    frontier: tuple[str, ...] = field(default=(), converter=as_tuple)  # the other passing branches
    compile_jobs: int = 1
    compile_jobs_reason: str = ""
    # wall seconds of explore's parts: "build" (contract and the pool), "bench" (the worker, all branches),
    # "race_check" (compute-sanitizer); the promotion pairing's are in paired.json (worker_seconds)
    seconds: dict[str, float] = field(factory=dict)
    schema_version: int = EXPLORE_SCHEMA_VERSION

    def __attrs_post_init__(self) -> None:
        # A champion or frontier branch that failed a gate would turn a failed kernel into evidence.
        passing = {b.id for b in self.branches if b.passed}
        if self.champion is not None and self.champion not in passing:
            raise ValueError(f"champion {self.champion!r} is not a passing branch")
        stray = [b for b in self.frontier if b not in passing or b == self.champion]
        if stray:
            raise ValueError(f"frontier {', '.join(stray)}: not passing branches other than the champion")

    def branch(self, branch_id: str) -> BranchOutcome | None:
        return next((b for b in self.branches if b.id == branch_id), None)


# -------------------------------------------------------------------------------------- attribution.json


@frozen
class MethodAttribution:
    """What one method is worth to the champion: attribution = ms_without - ms_champion (positive: the
    method saves time), with its interval. "inconclusive" (no ablation, or one that failed, or a pairing
    too unstable to decide) leaves every number and ``beyond_noise`` unknown."""

    method: str
    status: AttributionStatus
    reason: str = ""
    ms_champion: float | None = None
    ms_without: float | None = None
    attribution_ms: float | None = None
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    relative: float | None = None  # attribution_ms / ms_champion
    beyond_noise: bool | None = None  # the interval's lower bound clears the run's noise threshold
    effect: AblationEffect | None = None  # the paired statistics it was drawn from

    def __attrs_post_init__(self) -> None:
        # The update rules read beyond_noise only for a measured method: keep the two from disagreeing.
        if (self.status == "measured") != (self.beyond_noise is not None):
            raise ValueError(
                f"{self.method}: a measured attribution says whether it is beyond noise (true or false); "
                "an inconclusive one leaves beyond_noise null"
            )


@frozen
class AttributionRecord:
    """iterv{i}/attribution.json: one answer per method of the iteration, in the iteration's order."""

    iteration: int
    champion: str | None  # the champion kernel the ablations were paired with
    threshold: float  # the run's relative noise threshold (state.noise_threshold)
    methods: tuple[MethodAttribution, ...] = field(default=(), converter=as_tuple)
    champion_ms: float | None = None
    schema_version: int = ATTRIBUTION_SCHEMA_VERSION

    def get(self, method: str) -> MethodAttribution | None:
        return next((m for m in self.methods if m.method == method), None)


# -------------------------------------------------------------------------------------- sass_check.json


@frozen
class MethodSassCheck:
    """A SASS verdict of kopt_core.sass.verify for one method on the champion, plus whether a failure is
    *strong*: method-specific (the method's rule for this architecture requires its instructions to be
    present, and none are), which alone may call the method implementation_failed. A weak failure (a
    count relative to the baseline) means the compiler may have taken another path."""

    method: str
    status: str  # pass | fail | inconclusive | not_applicable | tool_error (SASS_STATUSES)
    strong: bool = False
    detail: str = ""  # what was expected and what was found (SassVerdict's expected and reason)
    # what decided it: the SASS listings, or (for a method with no SASS footprint) the ncu counter of its
    # signature in the champion's profile against the iteration's input profile
    evidence: str = "sass"

    def __attrs_post_init__(self) -> None:
        if self.status not in SASS_STATUSES:
            raise ValueError(
                f"{self.method}: status must be one of {', '.join(SASS_STATUSES)} (got {self.status!r})"
            )
        if self.strong and self.status != "fail":
            raise ValueError(f"{self.method}: only a failure can be strong (status is {self.status})")
        if self.evidence not in ("sass", "counters"):
            raise ValueError(f"{self.method}: evidence must be sass or counters (got {self.evidence!r})")
        if self.strong and self.evidence != "sass":
            raise ValueError(f"{self.method}: a counter's failure is never strong")


@frozen
class SassCheckRecord:
    """iterv{i}/sass_check.json: the champion's SASS checked for each method of the iteration."""

    iteration: int
    artifact: str  # the champion's binary that was disassembled
    baseline_artifact: str | None = None  # the baseline's, for rules relative to it
    methods: tuple[MethodSassCheck, ...] = field(default=(), converter=as_tuple)
    arch: str = ""
    schema_version: int = SASS_CHECK_SCHEMA_VERSION

    def get(self, method: str) -> MethodSassCheck | None:
        return next((m for m in self.methods if m.method == method), None)


# --------------------------------------------------------------------------------------------- reading


def read_explore(path: str | os.PathLike[str]) -> ExploreRecord:
    """An explore.json; OSError or ValueError when it cannot be read as one."""
    return read_document(path, ExploreRecord, "explore")


def read_attribution(path: str | os.PathLike[str]) -> AttributionRecord:
    """An attribution.json; OSError or ValueError when it cannot be read as one."""
    return read_document(path, AttributionRecord, "attribution")


def read_sass_check(path: str | os.PathLike[str]) -> SassCheckRecord:
    """A sass_check.json; OSError or ValueError when it cannot be read as one."""
    return read_document(path, SassCheckRecord, "sass_check")
