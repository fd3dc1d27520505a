"""What people see: rich tables and messages. Tools use --json instead."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.status import Status
from rich.table import Table
from rich.text import Text

from kopt_core.records import BenchResult, TimingStats
from kopt_core.run.store import AWAITING_CANDIDATES
from kopt_core.run.summary import fmt_ms

out = Console()
err = Console(stderr=True)


# Every message, path, compiler output and value shown here is foreign text: a file name like `[/].cu`, an
# exception saying "shape [/batch, N]" or nvcc quoting `y[i]` must reach the user verbatim. So messages are
# printed as plain Text (no markup parsed), and table cells, titles and labels pass what is not kopt's own
# markup through `escape`. Columns holding paths fold instead of cutting with "...".


def error(message: str) -> None:
    """``kopt: error: MESSAGE`` on stderr; MESSAGE is printed verbatim (never read as markup)."""
    err.print(Text.assemble(("kopt: error:", "bold red"), " ", str(message)), highlight=False, soft_wrap=True)


def warning(message: str) -> None:
    """``kopt: warning: MESSAGE`` on stderr; MESSAGE is printed verbatim (never read as markup)."""
    err.print(Text.assemble(("kopt: warning:", "yellow"), " ", str(message)), highlight=False, soft_wrap=True)


# How a finished step reads in the log off a terminal (StatusLine), and how a reader finds them again.
_FINISHED_STEP = re.compile(r"^kopt: (.+): done in ([0-9.]+) s$", re.MULTILINE)


def finished_steps(log: str) -> list[tuple[str, float]]:
    """The steps a log of kopt's stderr says finished ("kopt: WHAT: done in S s"), in order, with their
    wall times: where a run's time went."""
    return [(m.group(1), float(m.group(2))) for m in _FINISHED_STEP.finditer(log)]


class StatusLine:
    """kopt_core.progress's reporter for people: a rich status line (a spinner and what kopt is doing) on
    ``console`` while a long step runs, when ``console`` is a terminal. Nested or concurrent steps share
    the one line, which shows the newest step still running.

    Off a terminal (a log file, CI, a coding agent's shell) a spinner would only garble the log, and
    silence for minutes reads as a hang: each step is logged instead, one line when it starts and one with
    its wall time when it ends (``kopt: the hardware gate: done in 18.3 s``)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._lock = threading.Lock()
        self._running: list[str] = []
        self._status: Status | None = None

    def _show(self) -> None:
        if not self._running:
            if self._status is not None:
                self._status.stop()
                self._status = None
            return
        text = Text(self._running[-1])  # foreign text (a kernel's file name): never read as markup
        if self._status is None:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def _log(self, message: str) -> Iterator[None]:
        text = Text(f"kopt: {message} ...")  # foreign text: never read as markup
        self.console.print(text, highlight=False, soft_wrap=True)
        started = time.monotonic()
        outcome = "failed after"
        try:
            yield
            outcome = "done in"
        finally:
            elapsed = time.monotonic() - started
            line = Text(f"kopt: {message}: {outcome} {elapsed:.1f} s")
            self.console.print(line, highlight=False, soft_wrap=True)

    @contextmanager
    def __call__(self, message: str) -> Iterator[None]:
        if not self.console.is_terminal:
            yield from self._log(message)
            return
        with self._lock:
            self._running.append(message)
            self._show()
        try:
            yield
        finally:
            with self._lock:
                self._running.remove(message)
                self._show()


def status_line(console: Console | None = None) -> StatusLine:
    """The CLI's progress reporter: a status line on stderr (``console``), shown only on a terminal."""
    return StatusLine(console or err)


def _table(title: str, *columns: str, show_header: bool = True) -> Table:
    """A table whose TITLE (foreign text) is escaped and whose columns fold long words (paths, kernel
    names) rather than cut them."""
    table = Table(title=escape(title), show_header=show_header)
    for column in columns:
        table.add_column(column, overflow="fold", style="bold" if column == "what" else None)
    return table


def backends_table(rows: list[dict]) -> None:
    """``kopt backends``: each backend's toolchain and, apart from it, whether the GPU it needs is here
    (the machine's GPU, or why there is none, once below the table)."""
    table = _table("kopt backends", "backend", "suffixes", "toolchain", "GPU", "runs here", "why not / where")
    for row in rows:
        details = row.get("details") or {}
        if row["toolchain"]:
            where = ", ".join(f"{k}={v}" for k, v in details.items() if isinstance(v, (str, int)) and v)
        else:
            where = row["toolchain_reason"] or row["reason"]
        if not row["needs_gpu"]:
            gpu = "[dim]not needed[/]"
        else:
            gpu = "[green]yes[/]" if row["gpu_present"] else "[red]no[/]"
        table.add_row(
            escape(row["name"]),
            escape(" ".join(row["suffixes"])),
            "[green]yes[/]" if row["toolchain"] else "[red]no[/]",
            gpu,
            "[green]yes[/]" if row["available"] else "[red]no[/]",
            escape(where),
        )
    if rows:
        first = rows[0]
        table.caption = escape(f"GPU: {first['gpu']}" if first["gpu_present"] else first["gpu_reason"])
    out.print(table)


def _timing_row(table: Table, label: str, stats: TimingStats | None) -> None:
    if stats is None:
        return
    table.add_row(
        label, f"median {fmt_ms(stats.median_ms)}  p95 {fmt_ms(stats.p95_ms)}  min {fmt_ms(stats.min_ms)}"
    )
    table.add_row(
        "",
        f"n={stats.n} x {stats.launches_per_sample} launch(es), CV {stats.cv:.2%}, "
        f"median +-{stats.median_ci_rel:.2%} (95%), {escape(stats.stop_reason)}",
    )
    table.add_row("", escape(f"{stats.mode}, L2 {stats.l2}, {stats.clock}"))


def bench_report(result: BenchResult) -> None:
    ok = result.status == "ok" and result.correctness_pass and result.timing_valid
    table = _table(f"kopt bench: {result.kernel}", "what", "value", show_header=False)
    table.add_row("verdict", "[green]PASS[/]" if ok else f"[red]{escape(result.status.upper())}[/]")
    if result.error:
        table.add_row("error", f"[red]{escape(result.error)}[/] (stage: {escape(str(result.error_stage))})")
    device = result.device
    if device.capability:
        table.add_row("device", escape(f"{device.name} (sm {device.capability}, {device.sm_count} SMs)"))
    elif device.name:
        table.add_row("device", escape(device.name))
    if result.build is not None:
        b = result.build
        res = "; ".join(
            f"{r.name[:40]}: {r.registers} regs, {r.shared_bytes} B smem, "
            f"spills {r.spill_store_bytes}/{r.spill_load_bytes}"
            for r in b.resources
        )
        table.add_row(
            "build",
            escape(
                f"{b.compiler} {b.arch}, {'cache hit' if b.cache_hit else 'built'} in {b.build_seconds:.1f} s"
            ),
        )
        if res:
            table.add_row("", escape(res))
    for buf in result.buffers:
        table.add_row(
            escape(f"buffer {buf.name}"),
            escape(f"{buf.role} {buf.dtype}{list(buf.realised_shape)} ({buf.sized_by})"),
        )
    if result.tolerance is not None:
        table.add_row(
            "tolerance",
            escape(
                f"atol {result.tolerance.atol:g}, rtol {result.tolerance.rtol:g} ({result.tolerance.source})"
            ),
        )
    for check in result.correctness:
        worst = max((c.max_abs_err or 0.0 for c in check.buffers), default=0.0)
        state = "[green]pass[/]" if check.passed else f"[red]fail[/] {escape(str(check.message))}"
        table.add_row(
            f"seed {check.seed}",
            f"{escape(f'{check.phase}, outputs {check.output_init}')}: {state} (max abs err {worst:.3g})",
        )
    if result.outputs_must_start_zeroed:
        table.add_row("note", "[yellow]the kernel relies on its outputs starting zeroed[/]")
    _timing_row(table, "kernel", result.kernel_timing)
    _timing_row(table, "reference", result.reference_timing)
    w = result.workload
    # bench.workload sets both rates or neither
    if w is not None and w.tflops is not None and w.tbytes_per_s is not None:
        table.add_row(
            "workload",
            f"{w.flops:.3g} FLOP, {w.bytes_min:.3g} B at least: {w.tflops:.2f} TFLOP/s, "
            f"{w.tbytes_per_s * 1e3:.0f} GB/s",
        )
    if result.speedup_vs_reference is not None:
        table.add_row("speedup vs reference", f"{result.speedup_vs_reference:.2f}x")
    out.print(table)


def profile_report(outcome) -> None:
    roof, top, summary = outcome.roofline, outcome.ncu_top, outcome.summary
    table = _table(
        f"kopt profile: {summary.kernel_file or summary.report}", "what", "value", show_header=False
    )
    table.add_row("report", escape(str(summary.report)))
    table.add_row("bundle", escape(f"{summary.bundle} ({summary.bundle_reason})"))
    for kernel in summary.kernels:
        table.add_row(
            escape(f"kernel {kernel.id}"), escape(f"{kernel.name[:70]}: {fmt_ms(kernel.duration_ms)}")
        )
    if summary.harness_over_ncu is not None:
        table.add_row(
            "ncu vs kopt",
            f"ncu {fmt_ms(summary.ncu_duration_ms)}, kopt median "
            f"{fmt_ms(summary.harness_median_ms)} ({summary.harness_over_ncu:+.1%})",
        )
    gaps = ", ".join(
        f"{axis} {value:.2f}" if value is not None else f"{axis} unknown"
        for axis, value in (
            ("compute", roof.delta_compute),
            ("memory", roof.delta_memory),
            ("latency", roof.delta_latency),
        )
    )
    table.add_row(
        escape(roof.label), escape(f"gaps: {gaps}; bound: {roof.bound}; near peak: {roof.near_peak}")
    )
    table.add_row("axis budget", escape(", ".join(f"{k} {v}" for k, v in roof.axis_budget.items())))
    for axis, rows in top.axes.items():
        for row in rows:
            table.add_row(escape(f"top {axis}"), escape(row.evidence))
    if top.unknown:
        table.add_row("unknown", escape(", ".join(top.unknown)))
    table.add_row("written", escape(str(outcome.out_dir)))
    out.print(table)


def _gpu_line(gpu) -> str:
    """An env.json GPU (``EnvGpu``) in one line: name, capability, SMs, memory, driver."""
    parts = [gpu.name or "?"]
    if gpu.capability:
        parts.append(f"sm {gpu.capability}")
    if gpu.sm_count:
        parts.append(f"{gpu.sm_count} SMs")
    if gpu.memory_bytes:
        parts.append(f"{gpu.memory_bytes / (1 << 30):.0f} GiB")
    elif gpu.memory_mib:
        parts.append(f"{gpu.memory_mib / 1024:.0f} GiB")
    if gpu.driver:
        parts.append(f"driver {gpu.driver}")
    return ", ".join(parts)


def gate_progress(message: str) -> None:
    """One step of the hardware gate, dim on stderr: ``kopt gate: MESSAGE``."""
    err.print(f"kopt gate: {message}", style="dim", highlight=False, markup=False, soft_wrap=True)


def gate_report(env) -> None:
    """The hardware gate's findings (an ``Env``): verdict, GPU, context, counters, tools, backend,
    ceilings. The problems they add up to are the refusal's (or the diagnostic warning's), on stderr."""
    table = _table(f"kopt gate: {env.backend}", "what", "value", show_header=False)
    if env.generation_allowed:
        verdict = "[green]generation allowed[/]"
    elif env.diagnostic:
        verdict = "[yellow]diagnostic: generation never authorised[/]"
    else:
        verdict = "[red]generation refused[/]"
    table.add_row("verdict", f"{verdict} ({env.attempts} attempt(s))")
    if env.gpu is not None:
        table.add_row("gpu", escape(_gpu_line(env.gpu)) + f" [dim]({escape(env.gpu.source)})[/]")
    else:
        table.add_row("gpu", "[red]none[/]")
    table.add_row("cuda context", "[green]yes[/]" if env.cuda_context else "[red]no[/]")
    ncu = next((tool for tool in env.tools if tool.name == "ncu"), None)
    if env.can_read_counters:
        counters = "[green]readable[/]"
    elif ncu is not None and ncu.path and env.cuda_context:
        counters = "[red]not readable[/]"
    else:  # no ncu or no context to check them with: the reason is among the problems
        counters = "[red]not checked[/]"
    table.add_row("ncu counters", counters)
    for tool in env.tools:
        if tool.path:
            table.add_row(
                escape(tool.name), escape(tool.path + (f"  ({tool.version})" if tool.version else ""))
            )
        else:
            table.add_row(
                escape(tool.name),
                "[red]not found[/] [dim](looked in: " + escape(", ".join(tool.searched)) + ")[/]",
            )
    probe = env.backend_probe
    table.add_row(
        escape(f"backend {env.backend}"),
        "[green]available[/]"
        if probe is not None and probe.available
        else "[red]unavailable[/] " + escape(probe.reason if probe is not None else "(not probed)"),
    )
    ceilings = env.ceilings
    if ceilings is not None:
        rates = ", ".join(f"{name} {rate / 1e12:.1f}" for name, rate in ceilings.flops_per_s.items())
        table.add_row(
            "ceilings", escape(f"{ceilings.bandwidth_bytes_per_s / 1e12:.2f} TB/s; TFLOP/s: {rates}")
        )
    else:
        table.add_row("ceilings", "[dim]not measured[/]")
    # the problems are not rows here: the refusal (or a diagnostic run's warning) lists each once
    out.print(table)


def status_report(info: dict) -> None:
    table = _table(f"kopt status: {info['run_dir']}", "what", "value", show_header=False)
    colour = {"stopped": "red", "completed": "green"}.get(info["run_status"], "cyan")
    table.add_row("status", f"[{colour}]{escape(str(info['run_status']))}[/]")
    if info["stop"]:
        stop = info["stop"]
        table.add_row("stopped", escape(f"stage {stop['stage']}, exit {stop['exit_code']}: {stop['reason']}"))
    table.add_row(
        "iterations",
        f"{info['iterations_done']} done of {info['iterations_total']}, "
        f"{info['verified_iterations']} verified",
    )
    speedup = f" ({info['speedup']:.3f}x)" if info["speedup"] else ""
    table.add_row("best", f"{fmt_ms(info['best_ms'])} vs baseline {fmt_ms(info['baseline_ms'])}{speedup}")
    table.add_row("folders", escape(" ".join(info["iteration_dirs"] + info["staging_dirs"]) or "-"))
    lock = info["lock"]
    table.add_row(
        "lock",
        escape(f"held by pid {lock.get('pid')} ({lock.get('step')}, since {lock.get('started_at')})")
        if lock
        else "free",
    )
    out.print(table)


def sass_report(target, verdicts) -> None:
    colours = {"pass": "green", "fail": "red", "tool_error": "red", "inconclusive": "yellow"}
    table = _table(f"kopt sass: {target}", "method", "verdict", "found", "expected / why")
    for v in verdicts:
        found = ", ".join(f"{name} x{count}" for name, count in v.matched) or "-"
        colour = colours.get(v.status, "white")
        table.add_row(
            escape(v.method),
            f"[{colour}]{escape(v.status)}[/]",
            escape(found),
            escape(v.reason or v.expected),
        )
    out.print(table)


def sass_check_report(record) -> None:
    """sass_check.json of an iteration: each method's verdict on the champion."""
    colours = {"pass": "green", "fail": "red", "tool_error": "red", "inconclusive": "yellow"}
    table = _table(
        f"kopt sass: iterv{record.iteration} champion {record.artifact}", "method", "verdict", "detail"
    )
    for m in record.methods:
        colour = colours.get(m.status, "white")
        strength = " (strong)" if m.status == "fail" and m.strong else ""
        table.add_row(escape(m.method), f"[{colour}]{escape(m.status)}{strength}[/]", escape(m.detail))
    out.print(table)


def _yes(value) -> str:
    return {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]-[/]"}[value]


def explore_report(record, promotion_path) -> None:
    """explore.json: each branch through each gate, the champion, and the promotion's verdict."""
    from kopt_core.records.paired import read_paired_comparison

    table = _table(
        f"kopt explore: iterv{record.iteration} ({record.compile_jobs_reason})",
        "branch", "compile", "contract", "correct", "race-safe", "timed", "median", "robust CV", "why not",
    )  # fmt: skip
    for b in record.branches:
        table.add_row(
            escape(b.id),
            _yes(b.compile_pass),
            _yes(b.contract_pass),
            _yes(b.correctness_pass),
            _yes(b.race_safe),
            _yes(b.timing_valid),
            fmt_ms(b.median_ms),
            "-" if b.robust_cv is None else f"{b.robust_cv:.2%}",
            escape(b.failure),
        )
    out.print(table)
    out.print(Text(f"champion: {record.champion} ({fmt_ms(record.champion_ms)})"))
    if promotion_path.is_file():
        paired = read_paired_comparison(promotion_path)
        interval = "-" if paired.ci_low is None else f"[{paired.ci_low:.4f}, {paired.ci_high:.4f}]"
        speedup = "-" if paired.speedup is None else f"{paired.speedup:.4f}x"
        out.print(
            Text(
                f"paired with the best: {paired.verdict} (speedup {speedup}, 95% interval {interval}, "
                f"noise threshold {paired.threshold:.2%}, {paired.blocks_used} blocks, "
                f"{paired.blocks_voided} voided)"
            )
        )


def attribution_report(record) -> None:
    """attribution.json: what each method is worth, with its interval."""
    table = _table(
        f"kopt ablate: iterv{record.iteration} (noise threshold {record.threshold:.2%})",
        "method", "status", "saves (ms)", "95% interval (ms)", "relative", "beyond noise", "why",
    )  # fmt: skip
    for m in record.methods:
        interval = "-" if m.ci_low_ms is None else f"[{m.ci_low_ms:+.5f}, {m.ci_high_ms:+.5f}]"
        table.add_row(
            escape(m.method),
            escape(m.status),
            "-" if m.attribution_ms is None else f"{m.attribution_ms:+.5f}",
            interval,
            "-" if m.relative is None else f"{m.relative:+.2%}",
            _yes(m.beyond_noise),
            escape(m.reason),
        )
    out.print(table)


def update_report(state, iteration: int) -> None:
    """What the update changed: the iteration's history entry and the method classes."""
    entry = next((h for h in state.history if h.iteration == iteration), None)
    lines = [f"iterv{iteration} updated: best {state.best_file} ({fmt_ms(state.best_metric_ms)})"]
    if entry is not None:
        lines.append(
            f"  promoted: {'yes' if entry.promoted else 'no'}; verified: {'yes' if entry.verified else 'no'}"
        )
    for label, methods in (
        ("effective", state.effective_methods),
        ("ineffective", state.ineffective_methods),
        ("implementation-failed", state.implementation_failed_methods),
        ("unverified", state.unverified_methods),
    ):
        lines.append(f"  {label}: {', '.join(methods) or 'none'}")
    out.print(Text("\n".join(lines)))


def optimize_report(outcome) -> None:
    """Where ``kopt optimize`` left the run: completed with the result, or waiting for an agent."""
    run = escape(str(outcome.run_dir))
    if outcome.status == AWAITING_CANDIDATES:
        out.print(f"[bold]kopt optimize[/bold]: {run} awaits the candidates of its next iteration")
        out.print(f"  read {escape(str(outcome.brief))}, write what it asks, then:")
        out.print(f"  kopt optimize --resume {run}", highlight=False)
        return
    best = f"{outcome.best_ms:.4f} ms" if outcome.best_ms is not None else "unknown"
    base = outcome.baseline_ms
    gain = (
        f" ({base / outcome.best_ms:.2f}x the baseline's {base:.4f} ms)" if base and outcome.best_ms else ""
    )
    why = f"; stopped early: {escape(outcome.message)}" if outcome.message else ""
    out.print(
        f"[bold]kopt optimize[/bold]: {run} completed after {outcome.iterations_closed} iteration(s){why}"
    )
    out.print(f"  best: {escape(outcome.best_file)}, {best}{gain}")
    out.print(f"  summary: {run}/summary.md")


def search_report(outcome) -> None:
    """The fastest configurations (at most 5) and how fast the search went."""
    result = outcome.result
    top = outcome.top()
    table = Table(title=escape(f"kopt search: {outcome.kernel}"))
    for column in ("#", "config id", "configuration", "median", "vs best", "trial"):
        table.add_column(column, overflow="fold")
    best_ms = top[0].value_ms if top else None
    for rank, record in enumerate(top, start=1):
        ratio = f"{record.value_ms / best_ms:.2f}x" if best_ms else "-"
        table.add_row(
            str(rank),
            escape(record.config_id),
            escape(outcome.labels.get(record.config_id, "")),
            fmt_ms(record.value_ms),
            ratio,
            str(record.number),
        )
    out.print(table)
    lines = [
        f"{len(result.trials)} configurations evaluated in the study ({result.evaluated_now} now, "
        f"{result.failures} failed, {result.rejected} rejected by a constraint, {result.duplicates} "
        f"proposed again); stopped: {result.stop_reason}",
        f"{result.evaluated_now} in {result.elapsed_s:.1f} s: {result.trials_per_minute:.1f} trials/minute",
        f"trials: {outcome.trials_csv}",
    ]
    if outcome.best_file is not None:
        lines.append(f"best: {outcome.best_file} ({outcome.best_json})")
    else:
        lines.append("no configuration passed every check: the failures' reasons are in trials.csv")
    out.print(Text("\n".join(lines)))
