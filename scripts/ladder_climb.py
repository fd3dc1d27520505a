#!/usr/bin/env python
"""Climb a published optimization ladder (tests/fixtures/ladders) with kopt's own loop, a step an iteration.

    python scripts/ladder_climb.py climb --ladder transpose_nvidia [--steps N] [--workdir DIR] [--table-out F]
    python scripts/ladder_climb.py report --run RUN --ladder transpose_nvidia [--table-out F]
    python scripts/ladder_climb.py generate --ladder L    # what kopt's command generator runs

Step 1's kernel is the baseline. Iteration i implements the author's next step: its one branch (K=1) is
step i+1's kernel and the ablation of its method is step i's (the kernel without the method). The method
is chosen as an agent would, with ``kopt select --methods``: the first id of step i's ``labels.must[0]``
that the method registry knows. ``climb`` runs, checking every exit code:

    kopt optimize --baseline WORK/kernel.cu --ref L/ref.py --dims D --iterations 1 --k 1 --generator agent
    then for i = 1 .. N-1:
      (i > 1) kopt optimize --resume RUN --iterations i --generator agent     # opens i, awaits candidates
      kopt select --state RUN --iter i --methods M_i --why "<step i's next_step> (ladder L, step i+1)"
      kopt optimize --resume RUN --generator command -- PYTHON ladder_climb.py generate --ladder L

The agent generator leaves each iteration open and awaiting its candidates, so the agent's choice replaces
the scan's before the command generator writes them; the first command's run folder lies in the workdir
(a copy of step 1's kernel is the baseline: kopt puts the run folder beside it). An iteration whose branch
was not promoted ends the climb: the best going into the next iteration would not be the step its
ablation is, so that ablation would not be "the best without the method". ``climb --run RUN`` goes on
with a run a climb started (after a kill, or with more steps).

``report`` reads the run (state.json's history, each iteration's attribution.json and sass_check.json)
and prints one row per closed iteration: the step, the method, the author's figures, the median before
(the best going in) and after (the champion in explore), the paired speedup, the author's speedup when both
figures share a unit and a GPU, promotion, attribution, SASS verdict and the method's class; --table-out
writes the markdown table, --json-out (default: beside it) the rows as JSON.

Exit: 0 the climb reached its last step; 1 it stopped at a branch that was not promoted (the table is
written); a kopt command's own code (2, 3, 4) when one failed, with the command and its error shown.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()
LADDERS = REPO / "tests" / "fixtures" / "ladders"
KERNEL_FILES = ("kernel.cu", "kernel.py")
GENERATOR = "ladder_climb"
# units in which a larger figure is faster; in "ms" a smaller one is
RATE_UNITS = ("GB/s", "GFLOP/s", "TFLOP/s")


class ClimbStop(Exception):
    """The climb cannot go on: the message says why, the code is the script's exit."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------------------------ ladder


def ladder_dir(name: str) -> Path:
    """A ladder's folder: a path, or a name under tests/fixtures/ladders."""
    path = Path(name) if Path(name).is_dir() else LADDERS / name
    if not (path / "ref.py").is_file():
        raise ClimbStop(f"no ladder {name!r}: neither a folder with a ref.py nor one of {LADDERS}")
    return path.resolve()


def load_steps(ladder: Path) -> list[dict]:
    """The ladder's steps in order, each its case.json plus ``name``, ``dir`` and ``kernel``."""
    steps = []
    for path in sorted(ladder.glob("[0-9][0-9]_*/case.json")):
        case = json.loads(path.read_text())
        kernels = [path.parent / f for f in KERNEL_FILES if (path.parent / f).is_file()]
        if len(kernels) != 1:
            raise ClimbStop(f"{path.parent}: needs exactly one of {', '.join(KERNEL_FILES)}")
        case.update(name=path.parent.name, dir=path.parent, kernel=kernels[0])
        steps.append(case)
    if len(steps) < 2:
        raise ClimbStop(f"{ladder}: a ladder needs at least two steps (NN_name/case.json)")
    for number, step in enumerate(steps, start=1):
        if int(step["name"][:2]) != number:
            raise ClimbStop(f"{ladder}: step {step['name']} is not number {number}: steps are 01, 02, ...")
    return steps


def registry_ids() -> set[str]:
    """Every method id of kopt's registry."""
    from kopt_core.knowledge.methods import load_methods

    return {method.id for method in load_methods().methods}


def verifiable_ids() -> set[str]:
    """The methods whose check can pass, not only be not_applicable: a SASS signature with patterns, or
    an ncu counter beside its not_applicable (sass_signatures.json ``counters``)."""
    from kopt_core.sass import load_signatures

    signatures = load_signatures()
    return {
        method
        for method in registry_ids()
        if (signature := signatures.get(method)) is not None
        and (not signature.not_applicable or signature.counters is not None)
    }


def method_for(step: dict, known: set[str], verifiable: set[str] | frozenset[str] = frozenset()) -> str:
    """The id an agent selects for the author's next step: of labels.must[0]'s ids in the registry, the
    first whose SASS footprint kopt can check (``verifiable``), else the first."""
    must = (step.get("labels") or {}).get("must") or []
    if not must:
        raise ClimbStop(f"step {step['name']} has no labels.must: it is the ladder's last step")
    in_registry = [method for method in must[0] if method in known]
    for method in [m for m in in_registry if m in verifiable] + in_registry:
        return method
    raise ClimbStop(
        f"step {step['name']}: none of {', '.join(must[0])} (labels.must[0], the author's next step) is in "
        "kopt_core/references/method_registry.json; add the method to the registry, or map the step to one "
        "it has"
    )


# ------------------------------------------------------------------------------------------------- kopt


def kopt(command: list[str], *args: str) -> dict:
    """Run one kopt command with --json (its progress on stderr as it goes); its envelope's result. A
    non-zero exit is a ClimbStop with that exit code, naming the command and its error."""
    argv = [*command, *args]
    cut = argv.index("--") if "--" in argv else len(argv)
    argv = [*argv[:cut], "--json", *argv[cut:]]  # after `--` it would be the generator's argument
    shown = shlex.join(argv)
    print(f"ladder_climb: {shown}", file=sys.stderr, flush=True)
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    try:
        envelope = json.loads(done.stdout)
    except json.JSONDecodeError:
        envelope = {"error": {"message": done.stdout.strip() or "(no output)"}}
    if done.returncode != 0:
        error = envelope.get("error") or {}
        message = f"`{shown}` exited {done.returncode}"
        if error.get("type"):
            message += f" ({error['type']})"
        message += f":\n{error.get('message')}"
        if error.get("hint"):
            message += f"\n-> {error['hint']}"
        if done.returncode == 3:
            message += (
                "\nthe machine refused (no GPU, a missing tool or unreadable counters): climb on the H200"
            )
        raise ClimbStop(message, done.returncode)
    return envelope.get("result") or {}


def read_state(run: Path):
    from kopt_core.run.store import RunStore

    return RunStore(run).load()


def generator_argv(ladder: Path) -> list[str]:
    return [sys.executable, str(SCRIPT), "generate", "--ladder", str(ladder)]


def start(command: list[str], ladder: Path, steps: list[dict], workdir: Path, args) -> Path:
    """The first kopt optimize: gate, init, seed, iteration 1 opened and awaiting; the run folder."""
    workdir.mkdir(parents=True, exist_ok=True)
    baseline = workdir / steps[0]["kernel"].name
    shutil.copyfile(steps[0]["kernel"], baseline)
    before = set(workdir.glob("run_*"))
    options = ["--sanitizer-timeout", str(args.sanitizer_timeout)] if args.sanitizer_timeout else []
    try:
        result = kopt(
            command,
            "optimize",
            "--baseline",
            str(baseline),
            "--ref",
            str(ladder / "ref.py"),
            "--dims",
            json.dumps(steps[0]["dims"]),
            "--iterations",
            "1",
            "--k",
            "1",
            "--generator",
            "agent",
            *options,
        )
    except ClimbStop as stop:
        made = sorted(set(workdir.glob("run_*")) - before)
        if not made:
            raise
        goes_on = f"the run folder is {made[-1]}: once fixed, `climb --run {made[-1]}` goes on"
        raise ClimbStop(f"{stop}\n{goes_on}", stop.code) from None
    return Path(result["path"])


def climb_iteration(command: list[str], run: Path, ladder: Path, steps: list[dict], i: int, known: set[str]):
    """Iteration i: open it (the agent generator leaves it awaiting), choose step i's method, and have the
    command generator write step i+1 as its branch and step i as the ablation; the loop does the rest."""
    method = method_for(steps[i - 1], known, verifiable_ids())
    folder = run / f"iterv{i}"
    if not (folder / "methods.json").is_file():  # not opened yet (iteration 1 is opened by the start)
        kopt(command, "optimize", "--resume", str(run), "--iterations", str(i), "--generator", "agent")
    state = read_state(run)
    if state.run_status == "completed" and state.closed_iterations < i:
        raise ClimbStop(
            f"the run completed at iteration {i} without generating ({state.stop_reason}): the best kernel "
            f"({steps[i - 1]['name']}) is near the hardware's peak, so kopt ends the run here"
        )
    if not (folder / "candidates.json").is_file():
        chosen = json.loads((folder / "methods.json").read_text())
        picked = [m["id"] if isinstance(m, dict) else m for m in chosen.get("selected", [])]
        if chosen.get("chosen_by") != "agent" or picked != [method]:
            why = f"{steps[i - 1]['next_step']} (ladder {ladder.name}, step {i + 1})"
            # the author applies a method again that failed before here: an agent acknowledges that
            again = ["--acknowledge", method] if method in state.implementation_failed_methods else []
            kopt(
                command,
                "select",
                "--state",
                str(run),
                "--iter",
                str(i),
                "--methods",
                method,
                "--why",
                why,
                *again,
            )
    kopt(command, "optimize", "--resume", str(run), "--generator", "command", "--", *generator_argv(ladder))


def promoted(run: Path, i: int) -> tuple[bool, str]:
    entry = next((e for e in read_state(run).history if e.iteration == i), None)
    if entry is None:
        raise ClimbStop(f"iteration {i} of {run} is not closed after its resume: see {run}/summary.md")
    return bool(entry.promoted), entry.promotion or "no pairing"


def climb(args) -> int:
    ladder = ladder_dir(args.ladder)
    steps = load_steps(ladder)
    if args.steps is not None:
        if not 2 <= args.steps <= len(steps):
            raise ClimbStop(
                f"--steps {args.steps}: the ladder has {len(steps)} steps; give 2 to {len(steps)}"
            )
        steps = steps[: args.steps]
    known = registry_ids()
    for step in steps[:-1]:
        method_for(step, known, verifiable_ids())  # every step's method before any GPU time is spent
    command = shlex.split(args.kopt) if args.kopt else [sys.executable, "-m", "kopt_core.cli"]
    if args.run:
        run = Path(args.run).resolve()
        workdir = Path(args.workdir).resolve() if args.workdir else run.parent
    else:
        workdir = Path(args.workdir or REPO / "build" / "ladder_climb" / ladder.name).resolve()
        run = start(command, ladder, steps, workdir, args)
    print(f"ladder_climb: run {run}", file=sys.stderr)
    table_out = args.table_out or workdir / f"{run.name}.md"
    try:
        for i in range(1, len(steps)):
            if i > read_state(run).closed_iterations:
                climb_iteration(command, run, ladder, steps, i, known)
            won, verdict = promoted(run, i)
            if not won and i < len(steps) - 1:
                raise ClimbStop(
                    f"iteration {i}'s branch ({steps[i]['name']}) was not promoted (paired verdict "
                    f"{verdict}): the best going into iteration {i + 1} is not {steps[i]['name']}, so its "
                    "ablation would not be the best without the method; the climb stops here"
                )
    except ClimbStop:
        write_report(run, steps, table_out, args.json_out)  # what was climbed, before the reason
        raise
    write_report(run, steps, table_out, args.json_out)
    return 0


# ----------------------------------------------------------------------------------------------- generate


def generate(args) -> int:
    """The command generator's side (run by kopt in the iteration folder): step i+1 as branch b1, step i
    as the ablation of each of the iteration's methods, and candidates.json."""
    from kopt_core.records.loop import AblationSpec, BranchSpec, Candidates
    from kopt_core.run.candidates import write_candidates

    steps = load_steps(ladder_dir(args.ladder))
    i = int(os.environ["KOPT_ITER"])
    folder = Path(os.environ.get("KOPT_ITER_DIR") or ".")
    brief = json.loads(Path(os.environ["KOPT_BRIEF_JSON"]).read_text())
    methods = tuple(method["id"] for method in brief["methods"])
    if not 1 <= i < len(steps):
        raise ClimbStop(
            f"iteration {i}: the ladder's {len(steps)} steps give iterations 1 to {len(steps) - 1}"
        )
    before, after = steps[i - 1], steps[i]
    expected = method_for(before, registry_ids(), verifiable_ids())
    problems = []
    if brief["k"] != 1:
        problems.append(f"the run asks for {brief['k']} branches; a ladder step is one (kopt optimize --k 1)")
    if list(methods) != [expected]:
        problems.append(f"the iteration's methods are {list(methods)}, not step {i}'s [{expected}]")
    if brief["suffix"] != after["kernel"].suffix:
        problems.append(f"the run's kernels are {brief['suffix']}, the ladder's {after['kernel'].suffix}")
    best = Path(brief["best"]["path"])
    if not best.is_file() or best.read_bytes() != before["kernel"].read_bytes():
        why = (
            f"iteration {i - 1}'s branch was not promoted"
            if i > 1
            else "the run's baseline is another kernel"
        )
        problems.append(
            f"the best kernel going into iteration {i} ({best}) is not step {i}'s ({before['kernel']}): "
            f"{why}, so step {i}'s kernel is not the best without the method"
        )
    if problems:
        raise ClimbStop("generate: " + "; ".join(problems))
    branch = brief["files"]["branches"][0]
    copy(after["kernel"], folder / branch)
    ablations = []
    for method in methods:
        file = brief["files"]["ablations"][method]
        copy(before["kernel"], folder / file)
        note = f"step {i}, {before['name']}: {before['author_step']} (the author's kernel before the method)"
        ablations.append(AblationSpec(method=method, file=file, note=note))
    candidates = Candidates(
        iteration=i,
        generator=GENERATOR,
        methods=methods,
        branches=(
            BranchSpec(
                id="b1", file=branch, methods=methods, note=f"{after['name']}: {after['author_step']}"
            ),
        ),
        ablations=tuple(ablations),
    )
    path = write_candidates(folder, candidates)
    print(f"{path}: b1 = {after['name']}, ablations = {before['name']}")
    return 0


def copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


# ------------------------------------------------------------------------------------------------- report


def figure(published: dict | None) -> str:
    if not published:
        return "-"
    return f"{published['value']:g} {published['unit']} ({published['gpu']})"


def author_speedup(before: dict | None, after: dict | None) -> float | None:
    """after/before for a rate, before/after for a time; None unless both share a unit and a GPU (the
    figures of two GPUs say nothing about the step)."""
    if not before or not after or before["unit"] != after["unit"] or before["gpu"] != after["gpu"]:
        return None
    if before["unit"] in RATE_UNITS:
        return after["value"] / before["value"]
    if before["unit"] == "ms":
        return before["value"] / after["value"]
    return None


def attribution_text(attribution) -> str:
    if attribution is None:
        return "none"
    if attribution.status != "measured":
        return f"inconclusive ({attribution.reason})" if attribution.reason else "inconclusive"
    noise = "beyond noise" if attribution.beyond_noise else "within noise"
    interval = ""
    if attribution.ci_low_ms is not None and attribution.ci_high_ms is not None:
        interval = f" [{attribution.ci_low_ms:+.4f}, {attribution.ci_high_ms:+.4f}]"
    return f"{noise}: {attribution.attribution_ms:+.4f} ms{interval}"


def method_class(entry, method: str) -> str:
    for name, methods in (
        ("effective", entry.methods_effective),
        ("ineffective", entry.methods_ineffective),
        ("implementation_failed", entry.methods_implementation_failed),
        ("unverified", entry.methods_unverified),
    ):
        if method in methods:
            return name
    return "unclassified"


def row_of(steps: list[dict], entry, before_ms: float | None, attribution, sass) -> dict:
    """One closed iteration's row, from its history entry (kopt_core.records.state.HistoryEntry), the
    best's median going into it, its AttributionRecord and SassCheckRecord (None when missing)."""
    i = entry.iteration
    before, after = steps[i - 1], steps[i]
    methods = list(entry.methods)
    attributions = {m: attribution.get(m) if attribution else None for m in methods}
    checks = {c.method: c for c in sass.methods} if sass else {}
    sass_text = {
        m: (f"{checks[m].status}{' (strong)' if checks[m].strong else ''}" if m in checks else "none")
        for m in methods
    }
    return {
        "iteration": i,
        "step": f"{before['name']} -> {after['name']}",
        "author_step": after["author_step"],
        "methods": methods,
        "published_before": before.get("published"),
        "published_after": after.get("published"),
        "author_speedup": author_speedup(before.get("published"), after.get("published")),
        "before_ms": before_ms,
        "after_ms": entry.champion_ms,
        "speedup": entry.speedup,
        "speedup_ci": list(entry.speedup_ci) if entry.speedup_ci else None,
        "promotion": entry.promotion,
        "promoted": bool(entry.promoted),
        "attribution": {m: attribution_text(a) for m, a in attributions.items()},
        "sass": sass_text,
        "method_class": {m: method_class(entry, m) for m in methods},
    }


def report_rows(run: Path, steps: list[dict]) -> list[dict]:
    from kopt_core.jsonio import read_json
    from kopt_core.records.loop import read_attribution, read_sass_check

    state = read_state(run)
    bench = run / "baseline" / "bench.json"
    best_ms = (
        ((read_json(bench) or {}).get("kernel_timing") or {}).get("median_ms") if bench.is_file() else None
    )
    rows = []
    for entry in sorted(state.history, key=lambda e: e.iteration):
        if entry.iteration >= len(steps):
            break
        folder = run / f"iterv{entry.iteration}"
        attribution = (
            read_attribution(folder / "attribution.json") if (folder / "attribution.json").is_file() else None
        )
        sass = read_sass_check(folder / "sass_check.json") if (folder / "sass_check.json").is_file() else None
        rows.append(row_of(steps, entry, best_ms, attribution, sass))
        best_ms = entry.best_ms
    return rows


def number(value: float | None, form: str) -> str:
    return "-" if value is None else format(value, form)


def render_table(rows: list[dict]) -> str:
    header = [
        "iteration",
        "step",
        "method",
        "author's figures (before -> after)",
        "H200 before (ms)",
        "H200 after (ms)",
        "measured speedup",
        "author's speedup",
        "promoted",
        "attribution",
        "SASS",
        "method class",
    ]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        ci = row["speedup_ci"]
        speedup = number(row["speedup"], ".3f") + "x" if row["speedup"] is not None else "-"
        if ci:
            speedup += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
        cells = [
            str(row["iteration"]),
            f"{row['step']}: {row['author_step']}",
            ", ".join(row["methods"]) or "-",
            f"{figure(row['published_before'])} -> {figure(row['published_after'])}",
            number(row["before_ms"], ".4f"),
            number(row["after_ms"], ".4f"),
            speedup,
            number(row["author_speedup"], ".2f") + "x" if row["author_speedup"] is not None else "n/a",
            f"{'yes' if row['promoted'] else 'no'} ({row['promotion']})",
            "; ".join(row["attribution"].values()) or "-",
            "; ".join(row["sass"].values()) or "-",
            "; ".join(row["method_class"].values()) or "-",
        ]
        out.append("| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(out) + "\n"


def write_report(run: Path, steps: list[dict], table_out, json_out) -> None:
    rows = report_rows(run, steps)
    table = render_table(rows)
    stop = run / "stop.json"
    if stop.is_file():
        stopped = json.loads(stop.read_text())
        stage, code = stopped.get("stage"), stopped.get("exit_code")
        table += f"\nThe run stopped at {stage} (exit {code}): {stopped.get('reason')}\n"
    print(table, end="")
    if table_out:
        Path(table_out).parent.mkdir(parents=True, exist_ok=True)
        Path(table_out).write_text(table)
        json_out = json_out or Path(table_out).with_suffix(".json")
    if json_out:
        Path(json_out).write_text(json.dumps({"run": str(run), "rows": rows}, indent=2) + "\n")


def report(args) -> int:
    steps = load_steps(ladder_dir(args.ladder))
    write_report(Path(args.run).resolve(), steps, args.table_out, args.json_out)
    return 0


# --------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    climb_p = commands.add_parser("climb", help="climb a ladder with kopt's loop, a step an iteration")
    report_p = commands.add_parser("report", help="the table of a climbed run")
    generate_p = commands.add_parser(
        "generate", help="kopt's command generator: write iteration i's candidates"
    )
    for sub in (climb_p, report_p, generate_p):
        sub.add_argument(
            "--ladder", required=True, help="a ladder's name under tests/fixtures/ladders, or its folder"
        )
    climb_p.add_argument("--steps", type=int, help="climb the first N steps only (default: all)")
    climb_p.add_argument(
        "--workdir", help="where the baseline's copy and the run go (default: build/ladder_climb/L)"
    )
    climb_p.add_argument("--run", help="go on with this run, which a climb of the same ladder started")
    climb_p.add_argument("--sanitizer-timeout", type=float, help="kopt optimize --sanitizer-timeout")
    climb_p.add_argument("--kopt", help="the kopt command line (default: this Python's `-m kopt_core.cli`)")
    report_p.add_argument("--run", required=True, help="the run folder")
    for sub in (climb_p, report_p):
        sub.add_argument("--table-out", help="write the markdown table here (climb: default WORKDIR/RUN.md)")
        sub.add_argument("--json-out", help="write the rows as JSON here (default: the table's path, .json)")
    args = parser.parse_args(argv)
    try:
        return {"climb": climb, "report": report, "generate": generate}[args.command](args)
    except ClimbStop as stop:
        print(f"ladder_climb: {stop}", file=sys.stderr)
        return stop.code


if __name__ == "__main__":
    sys.exit(main())
