"""Running Nsight Compute on one invocation of a kernel, with the adaptive metric bundle.

The full set below 10 ms of kernel time, the light bundle at 10 ms and above: ncu's basic set plus the
hardware-counter metrics of kopt's metric registry that the basic set lacks (warp-state stalls, memory
workload: ``light_extra_metrics``), so the triggers that read them can fire on long kernels too. A full
replay that times out or exits with code 11 is retried light; a light run that ncu refuses (a non-zero
exit) is retried once with the basic set alone. Every attempt is recorded. ncu never touches the
card's clocks (``--clock-control none``). A run without a report is a failure (exit 3), never a silent
success.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from kopt_core import progress
from kopt_core.errors import HardwareError
from kopt_core.process import run_in_group
from kopt_core.records import NcuAttempt, ProfileLaunch, ProfileOptions
from kopt_core.tools import find_tool

REPORT_SUFFIX = ".ncu-rep"  # ncu writes <name>.ncu-rep
FULL_BELOW_MS = 10.0
BUNDLE_ARGS = {"full": ("--set", "full"), "light": ("--set", "basic")}
REPLAY_EXIT_CODE = 11  # ncu: the replay failed (commonly out of memory for saved state, or a timeout)
# Metrics only the full set collects (its source counters' PC sampling and warp-state statistics): the
# bundle an imported report was taken with is read off them.
FULL_SET_MARKERS = (
    "smsp__pcsamp_sample_count",
    "smsp__average_warps_issue_stalled_misc_per_issue_active.ratio",
)


def bundle_collected(metrics: Mapping[str, object]) -> str:
    """The bundle a report's metrics come from: "full" when it carries any of the full set's own
    metrics (``FULL_SET_MARKERS``), else "light" (the basic set, with or without kopt's extras)."""
    return "full" if any(name in metrics for name in FULL_SET_MARKERS) else "light"


# Metrics ncu computes by SASS patching (sass__*, smsp__sass_*) or from section-defined formulas
# (derived__*): costly, or not collectable by name; the light bundle leaves them to the full set.
NOT_IN_LIGHT = ("sass__", "smsp__sass_", "derived__")


def light_extra_metrics(registry=None) -> tuple[str, ...]:
    """The ncu metric names the light bundle adds to the basic set: for each metric-registry entry the
    basic set does not carry, its first name (or, for a sum or ratio, the inputs of its derivation),
    leaving out those in ``NOT_IN_LIGHT``; and the warp-stall family's total, which the stall shares
    divide by. tests/ncu checks every name against a real ncu 2025.3.1 full-set report of the H200."""
    from kopt_core.ncu.metrics import load_registry

    registry = registry or load_registry()
    names: list[str] = []
    for spec in registry.metrics:
        if "basic" in spec.sets:
            continue
        derive = spec.derive
        if derive is not None and derive.kind in ("sum_of", "ratio_of"):  # its inputs are what ncu knows
            wanted = [*derive.terms, *(n for n in (derive.numerator, derive.denominator) if n)]
        else:
            wanted = list(spec.ncu_names[:1])
        names += [n for n in wanted if not n.startswith(NOT_IN_LIGHT)]
    for group in registry.groups.values():
        names += [f.total for f in group.families if f.total and not f.total.startswith(NOT_IN_LIGHT)]
    return tuple(dict.fromkeys(names))


def find_ncu() -> str | None:
    return find_tool("ncu")


def choose_bundle(duration_ms: float | None) -> tuple[str, str]:
    """(bundle, why) from the kernel's measured duration."""
    if duration_ms is None:
        return "full", "kernel duration unknown: full set"
    if duration_ms < FULL_BELOW_MS:
        return "full", f"kernel takes {duration_ms:.4g} ms < {FULL_BELOW_MS:g} ms: full set"
    return "light", f"kernel takes {duration_ms:.4g} ms >= {FULL_BELOW_MS:g} ms: light (basic) set"


def ncu_command(
    ncu: str,
    bundle: str,
    report_base: Path,
    target: list[str],
    kernel_filter: str | None,
    *,
    light_extras: bool = True,
) -> list[str]:
    command = [
        ncu,
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--force-overwrite",
        "--export",
        str(report_base),
        *BUNDLE_ARGS[bundle],
    ]
    if bundle == "light" and light_extras:
        command += ["--metrics", ",".join(light_extra_metrics())]
    if kernel_filter:
        command += ["--kernel-name", kernel_filter]
    return command + list(target)


def profile(
    target: list[str],
    out_dir: Path,
    *,
    launch: ProfileLaunch | None = None,
    options: ProfileOptions | None = None,
    name: str = "profile",
    duration_ms: float | None = None,
    ncu: str | None = None,
) -> tuple[Path, str, str, list[NcuAttempt]]:
    """Profile ``target`` (a command that brackets one invocation with cudaProfilerStart/Stop).

    ``launch`` is the backend's answer for the artifact (ncu's kernel filter, extra environment; default:
    every kernel, no extra environment). Of ``options`` the runner reads the bundle (None: chosen from
    ``duration_ms``), ``ncu_timeout_s`` and ``full_timeout_s``, which limits a full-set attempt (default
    ``ncu_timeout_s``); the light retry gets ``ncu_timeout_s``.
    Returns (report path, bundle, why that bundle, attempts). Raises HardwareError when no attempt gave
    a report; the attempts are in the error's message and in ``out_dir/ncu_*.log``.
    """
    ncu = ncu or find_ncu()
    if ncu is None:
        raise HardwareError(
            "ncu (Nsight Compute) not found on PATH, in CUDA_HOME or /opt/nvidia/nsight-compute",
            hint="install Nsight Compute or put ncu on PATH",
        )
    launch = launch or ProfileLaunch()
    options = options or ProfileOptions()
    forced, timeout_s, full_timeout_s = options.bundle, options.ncu_timeout_s, options.full_timeout_s
    out_dir.mkdir(parents=True, exist_ok=True)
    bundle, reason = (forced, f"forced: {forced}") if forced else choose_bundle(duration_ms)
    env = dict(os.environ, **launch.env)
    attempts: list[NcuAttempt] = []
    report_base = out_dir / name
    report = report_base.with_suffix(REPORT_SUFFIX)
    light_extras = True
    while True:
        report.unlink(missing_ok=True)
        command = ncu_command(
            ncu, bundle, report_base, target, launch.kernel_filter, light_extras=light_extras
        )
        log = out_dir / f"ncu_{name}_{bundle}.log"
        limit = full_timeout_s if (bundle == "full" and full_timeout_s is not None) else timeout_s
        with progress.step(f"profiling {name} with ncu ({bundle} set, replaying the kernel)"):
            ran = run_in_group(command, timeout_s=limit, env=env, log_path=log)
        if ran.error:
            raise HardwareError(
                f"cannot run ncu ({ncu}): {ran.error}", hint="install Nsight Compute or put ncu on PATH"
            )
        code, timed_out = ran.returncode, ran.timed_out
        attempts.append(
            NcuAttempt(
                command=command,
                bundle=bundle,
                reason=reason,
                returncode=code,
                timed_out=timed_out,
                seconds=ran.seconds,
                log=str(log),
            )
        )
        if code == 0 and report.is_file() and report.stat().st_size > 0:
            return report, bundle, reason, attempts
        if bundle == "full" and (timed_out or code == REPLAY_EXIT_CODE):
            why = "timed out" if timed_out else f"exited {REPLAY_EXIT_CODE}"
            bundle, reason = "light", f"the full replay {why}: retried with the light set"
            continue
        if bundle == "light" and light_extras and not timed_out and code not in (0, None):
            light_extras = False
            reason += (
                f"; ncu exited {code} with the light bundle's extra metrics: retried with the basic set alone"
            )
            continue
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        raise HardwareError(
            f"ncu gave no report ({'timed out' if timed_out else f'exit {code}'} with the {bundle} set); "
            f"log {log}:\n    " + "\n    ".join(tail),
            hint="check that ncu can read the GPU's counters (ERR_NVGPUCTRPERM means it may not)",
        )


def export_csv(report: Path, page: str, *, ncu: str | None = None, timeout_s: float = 300.0) -> str:
    """``ncu --import REPORT --csv --page raw|details``: the report as CSV text."""
    ncu = ncu or find_ncu()
    if ncu is None:
        raise HardwareError(
            f"ncu is needed to read {report}", hint="install Nsight Compute, or import a CSV export"
        )
    done = run_in_group(
        [ncu, "--import", str(report), "--csv", "--page", page], timeout_s=timeout_s, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        why = "timed out" if done.timed_out else done.error or f"exit {done.returncode}"
        raise HardwareError(
            f"ncu --import {report} --page {page} failed ({why}): "
            f"{(done.stderr or done.stdout).strip()[:500]}"
        )
    return done.stdout
