"""``kopt sass --state S --iter I``: is each of the iteration's methods really in the champion's SASS,
judged relative to the baseline's (spec step 3i)? ``iterv{i}/sass_check.json``.

Verdicts come from the champion's backend (``kopt_sass_verify``, by default cuobjdump and
references/sass_signatures.json): pass | fail | inconclusive | not_applicable | tool_error. A missing
tool or a backend without SASS is a tool_error, never a pass. A failure is *strong* (the update step may
then call the method implementation_failed) only when it is method-specific: the method's signature for
this architecture requires instructions that are absent altogether (no HGMMA in a kernel claiming wgmma,
no LDS/STS in one claiming shared-memory tiling). A failed count relative to the baseline (more FFMA,
fewer branches) is weak: other code the compiler chose can move those counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from kopt_core.errors import ConfigError, KoptError
from kopt_core.jsonio import write_json
from kopt_core.records import to_data
from kopt_core.records.loop import (
    MethodSassCheck,
    SassCheckRecord,
    read_sass_check,
)
from kopt_core.run.candidates import iteration_methods
from kopt_core.run.layout import CHAMPION_PREFIX, EXPLORE_FILE, NCU_TOP_FILE, SASS_CHECK_FILE, kernel_file
from kopt_core.run.prepare import open_folder, prepare_in_run
from kopt_core.run.stop import stop_on_failure
from kopt_core.run.store import RunStore
from kopt_core.sass import SassToolError
from kopt_core.sass.verify import SassVerdict, counter_verdict, load_signatures
from kopt_core.steps.sass import verify_artifact_sass

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager


def is_strong(verdict: SassVerdict, arch: str) -> bool:
    """A failure of the rule for ``arch`` that asks for the method's instructions to be present."""
    if verdict.status != "fail":
        return False
    signature = load_signatures().get(verdict.method)
    rule = signature.rule_for(arch) if signature is not None else None
    return rule is not None and rule.relative == "present"


def with_counters(checks: list[MethodSassCheck], folder: Path) -> list[MethodSassCheck]:
    """``checks`` with each not_applicable method whose signature names an ncu counter decided by that
    counter instead: the champion's profile (kernel_ncu_top.json, step 3g) against the profile of the
    kernel the iteration started from (ncu_top.json, step 3a). Without the champion's profile the verdict
    stays not_applicable, saying which command writes it."""
    signatures = load_signatures()
    decided = []
    for check in checks:
        signature = signatures.get(check.method)
        if check.status != "not_applicable" or signature is None or signature.counters is None:
            decided.append(check)
            continue
        before, after = folder / NCU_TOP_FILE, folder / f"{CHAMPION_PREFIX}{NCU_TOP_FILE}"
        if not (before.is_file() and after.is_file()):
            missing, writer = (
                (after, "kopt profile --which kernel") if before.is_file() else (before, "kopt iter open")
            )
            detail = f"{check.detail}; its counter check needs {missing.name} ({writer})"
            decided.append(attrs.evolve(check, detail=detail))
            continue
        verdict = counter_verdict(signature, _values(before), _values(after))
        assert verdict is not None  # the signature has a counter rule
        detail = "; ".join(x for x in (verdict.expected, verdict.reason) if x)
        decided.append(
            MethodSassCheck(method=check.method, status=verdict.status, detail=detail, evidence="counters")
        )
    return decided


def _values(path: Path) -> dict:
    from kopt_core.steps.select import read_ncu_top

    return dict(read_ncu_top(path).values)


def check_iteration_sass(pm: PluginManager, store: RunStore, iteration: int) -> SassCheckRecord:
    """Check the champion of iteration ``iteration`` for each selected method; sass_check.json."""
    with store.locked("sass"):
        state = store.load()
        folder = open_folder(store, state, iteration, "sass")
        path = folder / SASS_CHECK_FILE
        if path.is_file():
            return read_sass_check(path)
        if not (folder / EXPLORE_FILE).is_file():
            raise ConfigError(f"{folder} has no {EXPLORE_FILE}: explore the branches first (kopt explore)")
        champion_file = folder / kernel_file(Path(state.best_file).suffix)
        methods = iteration_methods(folder)
        try:
            champion = prepare_in_run(pm, state, "check its SASS", kernel=champion_file, require_gpu=False)
            baseline = prepare_in_run(
                pm, state, "check its SASS", kernel=state.baseline_file, require_gpu=False
            )
        except KoptError as error:
            stop_on_failure(store, "sass", error, iteration=iteration)
        arch = champion.artifact.arch
        try:
            verdicts = verify_artifact_sass(
                pm, champion.artifact, list(methods), arch=arch, baseline=baseline.artifact
            )
        except SassToolError as exc:  # no disassembler for this backend: every method is unverified
            verdicts = [SassVerdict(method=m, status="tool_error", reason=str(exc)) for m in methods]
        checks = [
            MethodSassCheck(
                method=v.method,
                status=v.status,
                strong=is_strong(v, arch),
                detail="; ".join(x for x in (v.expected, v.reason) if x),
            )
            for v in verdicts
        ]
        record = SassCheckRecord(
            iteration=iteration,
            artifact=champion.artifact.path,
            baseline_artifact=baseline.artifact.path,
            arch=arch,
            methods=tuple(with_counters(checks, folder)),
        )
        write_json(path, to_data(record))
        return record
