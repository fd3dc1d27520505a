"""Where things live in a run folder (docs/loop.md, "Output layout"), and how an iteration is published.

Every file and folder name of a run folder is here, and the modules of ``kopt_core.run`` and
``kopt_core.generate`` take them from here. The names a standalone step writes into its own output folder
and a run reuses (a profile's ncu_top.json, roofline.json, profile.json; the selection's methods.json and
analysis.md) are defined once by that step and named here under the same constant.

An iteration is built in ``.staging_iterv{i}`` and becomes ``iterv{i}`` by one rename, only after its
pre-generation gates passed: a reader never sees half an iteration.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from kopt_core.ncu.runner import REPORT_SUFFIX
from kopt_core.steps.bench import BENCH_FILE
from kopt_core.steps.profile import (
    NCU_TOP_FILE,
    PROFILE_FILE,
    ROOFLINE_CHART,
    ROOFLINE_FILE,
    SASS_SUFFIX,
)
from kopt_core.steps.select import ANALYSIS_FILE, METHODS_FILE

RUN_PREFIX = "run_"

# The run folder: what kopt keeps of the run, and the summary rendered from it (with its two charts).
STATE_FILE = "state.json"
STOP_FILE = "stop.json"
ENV_FILE = "env.json"  # the gate's env.json, copied
LOCK_FILE = ".kopt.lock"
OPTIMIZE_FILE = "optimize.json"  # how `kopt optimize` was started
SUMMARY_FILE = "summary.md"
SUMMARY_ROOFLINE_CHART = ROOFLINE_CHART  # the baseline and the champions on the roofline
SPEEDUP_CHART = "speedup.png"

# baseline/: the copied baseline, its bench.json, its profile (BASELINE_PROFILE.ncu-rep, ..., the files of
# a profile below) and the A/A pairing that measured the run's noise.
BASELINE_DIR = "baseline"
BASELINE_PROFILE = "baseline"
NOISE_FILE = "noise_aa.json"

# A kernel's check and timing (BENCH_FILE: baseline/, and beside every branch and ablation), and the paired
# comparison (an iteration's promotion; an ablation against the champion).
PAIRED_FILE = "paired.json"

# A profile's files (kopt_core.steps.profile): ``<name>.ncu-rep`` and ``<name>.sass``, and NCU_TOP_FILE,
# ROOFLINE_FILE and PROFILE_FILE after a prefix. In iterv{i}/ the best going in is profiled as BEST_INPUT
# (no prefix: the evidence the iteration's methods are selected on), the champion as CHAMPION (its JSON
# files prefixed ``kernel_``).
BEST_INPUT = "best_input"
CHAMPION = "kernel"
CHAMPION_PREFIX = f"{CHAMPION}_"
CHAMPION_REPORT = f"{CHAMPION}{REPORT_SUFFIX}"  # `kopt profile --which kernel` writes it

# iterv{i}/: the selection (METHODS_FILE, ANALYSIS_FILE), the brief, the candidates, what explore, ablate
# and the SASS check found. PROMOTION_FILE is the paired comparison of the champion (B) with the best going
# into the iteration (A).
BRIEF_MD = "brief.md"  # what a generator reads (and brief.json the same as data)
BRIEF_JSON = "brief.json"
GENERATOR_LOG = "generator.log"  # the command generator's stdout and stderr
CANDIDATES_FILE = "candidates.json"
EXPLORE_FILE = "explore.json"
PROMOTION_FILE = PAIRED_FILE
ATTRIBUTION_FILE = "attribution.json"
SASS_CHECK_FILE = "sass_check.json"

# An iteration's candidates: branches/b{n}/kernel<suffix> and ablations/<method>/kernel<suffix>, each kernel
# in its own folder (where its bench.json and paired.json go), named in candidates.json.
BRANCHES_DIR = "branches"
ABLATIONS_DIR = "ablations"
KERNEL_STEM = "kernel"  # a candidate's file, and the champion's in iterv{i}/, is kernel<suffix>
SEARCH_DIR = "search"  # iterv{i}/search/: the search generator's study, its trials and best.json

__all__ = [
    "ABLATIONS_DIR",
    "ANALYSIS_FILE",
    "ATTRIBUTION_FILE",
    "BASELINE_DIR",
    "BASELINE_PROFILE",
    "BENCH_FILE",
    "BEST_INPUT",
    "BRANCHES_DIR",
    "BRIEF_JSON",
    "BRIEF_MD",
    "CANDIDATES_FILE",
    "CHAMPION",
    "CHAMPION_PREFIX",
    "CHAMPION_REPORT",
    "ENV_FILE",
    "EXPLORE_FILE",
    "GENERATOR_LOG",
    "KERNEL_STEM",
    "LOCK_FILE",
    "METHODS_FILE",
    "NCU_TOP_FILE",
    "NOISE_FILE",
    "OPTIMIZE_FILE",
    "PAIRED_FILE",
    "PROFILE_FILE",
    "PROMOTION_FILE",
    "ROOFLINE_FILE",
    "RUN_PREFIX",
    "SASS_CHECK_FILE",
    "SEARCH_DIR",
    "SPEEDUP_CHART",
    "STATE_FILE",
    "STOP_FILE",
    "SUMMARY_FILE",
    "SUMMARY_ROOFLINE_CHART",
    "baseline_dir",
    "iteration_dir",
    "iteration_dirs",
    "iteration_number",
    "kernel_file",
    "new_run_dir",
    "publish",
    "report_file",
    "sass_file",
    "staging_dir",
    "staging_dirs",
]


def new_run_dir(baseline: str | os.PathLike, now: datetime | None = None) -> Path:
    """Create ``<baseline's folder>/run_YYYYMMDD_HHMMSS/`` (``_2``, ``_3``, ... when that second's name is
    taken) and return it. Creation is exclusive (mkdir), so two kopts never share a folder."""
    parent = Path(baseline).resolve().parent
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
    suffix = 1
    while True:
        candidate = (
            parent / f"{RUN_PREFIX}{stamp}" if suffix == 1 else parent / f"{RUN_PREFIX}{stamp}_{suffix}"
        )
        try:
            candidate.mkdir()
        except FileExistsError:
            suffix += 1
            continue
        return candidate


def baseline_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / BASELINE_DIR


def iteration_dir(run_dir: str | os.PathLike, i: int) -> Path:
    return Path(run_dir) / f"iterv{int(i)}"


def staging_dir(run_dir: str | os.PathLike, i: int) -> Path:
    return Path(run_dir) / f".staging_iterv{int(i)}"


def iteration_number(path: str | os.PathLike) -> int | None:
    """i for a folder named ``iterv{i}``, else None."""
    name = Path(path).name
    if name.startswith("iterv") and name[5:].isdigit():
        return int(name[5:])
    return None


def iteration_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """The published iteration folders, in iteration order."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [
        (number, p) for p in run_dir.iterdir() if p.is_dir() and (number := iteration_number(p)) is not None
    ]
    return [p for _, p in sorted(found, key=lambda pair: pair[0])]


def staging_dirs(run_dir: str | os.PathLike) -> list[Path]:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.iterdir() if p.is_dir() and p.name.startswith(".staging_iterv"))


def publish(staging: str | os.PathLike, final: str | os.PathLike) -> Path:
    """Make ``staging`` visible as ``final`` with one rename. Refuses (FileExistsError) if ``final`` exists:
    a published iteration is never replaced."""
    staging, final = Path(staging), Path(final)
    if not staging.is_dir():
        raise FileNotFoundError(f"staging folder {staging} does not exist")
    if os.path.lexists(final):
        raise FileExistsError(f"{final} already exists; a published iteration is never replaced")
    os.rename(staging, final)  # an existing non-empty final would also make rename fail (ENOTEMPTY)
    return final


def kernel_file(suffix: str) -> str:
    """What a candidate's kernel (and an iteration's champion) is called: ``kernel<suffix>``."""
    return f"{KERNEL_STEM}{suffix}"


def report_file(name: str) -> str:
    """The ncu report of the profile named ``name`` (``best_input.ncu-rep``, ``kernel.ncu-rep``)."""
    return f"{name}{REPORT_SUFFIX}"


def sass_file(name: str) -> str:
    """The SASS listing kept beside the profile named ``name``."""
    return f"{name}{SASS_SUFFIX}"
