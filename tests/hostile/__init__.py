"""Hostile and malformed input: every case runs the real ``kopt`` command line in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def run_kopt(
    *args: object,
    cwd: Path | None = None,
    plugins: str = "cuda",
    columns: int = 200,
    env: dict[str, str] | None = None,
    python: Sequence[str] = ("-m", "kopt_core.cli"),
    timeout: float = 300,
    unset: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """``kopt ARGS`` as a user would type it, with only ``plugins`` loaded (KOPT_PLUGINS) and a terminal
    ``columns`` wide; ``env`` adds to the environment and ``unset`` removes from it. Whatever the input,
    kopt never shows a traceback."""
    full_env = dict(os.environ, KOPT_PLUGINS=plugins, COLUMNS=str(columns), **(env or {}))
    for name in unset:
        full_env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, *python, *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc
