"""``kopt init``: step 1 of a run. Check everything that needs no GPU, then create the run folder.

Order: the static contract (backend, reference, preflight), env.json, the options; only then the folder.
A ConfigError before the folder exists leaves nothing behind; a failure while creating it removes the
half-made folder. The run starts with ``baseline/`` (the copied baseline), ``env.json`` and ``state.json``
only: iteration folders appear later, after their gates pass.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kopt_core.errors import ConfigError
from kopt_core.records.state import SANITIZER_TIMEOUT_S, State, is_positive_seconds
from kopt_core.run.layout import baseline_dir, new_run_dir
from kopt_core.run.store import RunStore, read_env
from kopt_core.steps.bench import static_contract

if TYPE_CHECKING:
    from kopt_core.plugins import PluginManager

NUMERICS_MODES = ("reference", "strict", "approximate")


def _positive(name: str, value: object, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}", hint=f"pass {flag} 1 or more")
    return value


def normalize_compile_jobs(value: str | int) -> str:
    """``auto`` or a positive integer, kept as a string (state.json's compile_jobs)."""
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise ConfigError(f"--compile-jobs must be 'auto' or a positive integer, got {value!r}")
    return str(int(text))


def normalize_sanitizer_timeout(value: float) -> float:
    """A positive, finite number of seconds (state.json's sanitizer_timeout_s), or ConfigError (exit 4)."""
    if not is_positive_seconds(value):
        raise ConfigError(f"--sanitizer-timeout must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def init_run(
    pm: PluginManager,
    *,
    baseline: str | Path,
    ref: str | Path,
    dims: dict[str, Any],
    env_path: str | Path,
    iterations: int = 3,
    ncu_num: int = 5,
    branches: int = 4,
    compile_jobs: str | int = "auto",
    numerics_mode: str = "reference",
    backend: str | None = None,
    now: datetime | None = None,
    on_warning: Callable[[str], None] | None = None,
    sanitizer_timeout_s: float = SANITIZER_TIMEOUT_S,
) -> RunStore:
    """Check the baseline, reference, dims, env.json and options, then create the run folder. Raises
    ConfigError (exit 4) for anything the user must fix; nothing is created in that case."""
    # 1. the static contract: no GPU, no build
    info, _, candidate = static_contract(
        pm, baseline, ref, dims, backend=backend, on_warning=on_warning, what="baseline"
    )
    path = Path(candidate.path)

    # 2. the hardware gate's verdict
    env = read_env(env_path)
    if env.backend and env.backend != info.name and on_warning:
        on_warning(f"env.json was written for the {env.backend} backend, the baseline uses {info.name}")
    if not env.generation_allowed and on_warning:
        on_warning(
            "env.json does not allow generation (the hardware gate failed or was diagnostic): the run "
            f"will stop before its first benchmark; run `kopt gate --backend {info.name} --out env.json` "
            "on a machine that passes and give that env.json to the run with `kopt seed --state RUN --retry "
            "--env env.json`"
        )

    # 3. the options
    iterations = _positive("iterations", iterations, "--iterations")
    ncu_num = _positive("ncu_num", ncu_num, "--ncu-num")
    branches = _positive("branches", branches, "--branches")
    if numerics_mode not in NUMERICS_MODES:
        raise ConfigError(
            f"--numerics-mode must be one of {', '.join(NUMERICS_MODES)}, got {numerics_mode!r}"
        )
    jobs = normalize_compile_jobs(compile_jobs)
    sanitizer_timeout_s = normalize_sanitizer_timeout(sanitizer_timeout_s)

    # 4. the folder: baseline/ + env.json + state.json, or nothing at all
    run_dir = new_run_dir(path, now=now)
    try:
        store = RunStore(run_dir)
        copy_dir = baseline_dir(store.run_dir)
        copy_dir.mkdir()
        copy = copy_dir / path.name
        shutil.copy2(path, copy)
        store.copy_env(env_path)
        state = State(
            run_dir=str(store.run_dir),
            baseline_file=str(path.resolve()),
            ref_file=str(Path(ref).resolve()),
            best_file=str(copy),
            dims=dict(dims),
            backend=info.name,
            env=env,
            iterations_total=iterations,
            ncu_num=ncu_num,
            branches=branches,
            compile_jobs=jobs,
            numerics_mode=numerics_mode,
            sanitizer_timeout_s=sanitizer_timeout_s,
            run_status="initialized",
            generation_allowed=env.generation_allowed,
            hardware_attempts=env.attempts,
        )
        store.save(state)
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return store
