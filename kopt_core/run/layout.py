"""Where things live in a run folder (docs/loop.md, "Output layout"), and how an iteration is published.

An iteration is built in ``.staging_iterv{i}`` and becomes ``iterv{i}`` by one rename, only after its
pre-generation gates passed: a reader never sees half an iteration.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

RUN_PREFIX = "run_"
BASELINE_DIR = "baseline"

# An iteration's candidates: branches/b{n}/kernel<suffix> and ablations/<method>/kernel<suffix>, each kernel
# in its own folder (where its bench.json and paired.json go), named in candidates.json.
BRANCHES_DIR = "branches"
ABLATIONS_DIR = "ablations"
KERNEL_STEM = "kernel"  # a candidate's file, and the champion's in iterv{i}/, is kernel<suffix>
BRIEF_MD = "brief.md"  # what a generator reads (and brief.json the same as data)
BRIEF_JSON = "brief.json"


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
