#!/usr/bin/env python
"""The labelled selection corpus (tests/fixtures/selection): profile it on a GPU, score kopt's selection.

    python scripts/selection_corpus.py profile [--archive OUT.tar.gz]      # on the H200: the evidence
    python scripts/selection_corpus.py score [--markdown FILE] [--json FILE]  # anywhere: hit and waste
    python scripts/selection_corpus.py refresh    # the kept raw CSVs analysed again by this kopt

Each case folder holds a deliberately flawed kernel (kernel.cu or kernel.py), its ref.py and case.json:
the backend, dims, kind of work, dtype, the one main flaw, and the expert labels written before any
profile existed: ``must`` (groups of method ids, at least one of each group must be selected) and
``waste`` (methods that would waste a slot on this kernel).

``profile`` builds every case in parallel (``--jobs``), checks and times each one once in a single
long-lived bench worker (no evidence from a kernel that fails its reference), then profiles each with
kopt's ``profile_prepared`` under the full and the light bundle, ``--ncu-parallel`` at a time: Nsight
Compute serialises the kernel launches of the processes it profiles through its lock file, so only the
CPU parts (Python start-up, CSV export, disassembly) overlap; ``--ncu-parallel 1`` profiles strictly one
after another. The evidence ``kopt select`` reads is copied into ``<case>/evidence/<bundle>/``:
roofline.json, ncu_top.json, profile.json, the kernel's SASS (kernel.sass, trimmed to the lines kopt
parses: architecture, function and instruction lines without their encodings) and the report's raw CSV
page gzipped (kernel.raw.csv.gz, to analyse again when the metric registry changes). ``<case>/evidence/
profile_run.json`` says what ran, how long it took and what failed. One case failing never stops the
others; each ncu run and each bench has ``--case-timeout-s``; no profile starts after ``--deadline-s``;
SIGTERM writes the archive of what is done and exits. ``--archive`` packs every evidence folder into one
tar.gz (what comes back from a device machine).

``score`` runs the standalone selection (``select_standalone``, arch ``--arch``, the case's backend and
dtype) on every evidence folder and compares it with the labels: a hit is every must group having at least
one selected method; waste is the selected methods in the case's waste list. It prints a table per case
and bundle and the hit rate (hits / profiles scored) and waste rate (wasted slots / selected slots), per
bundle and over all. ``--reimport`` first analyses the kept raw CSV again with this kopt (no GPU needed).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "selection"
BUNDLES = ("full", "light")
KERNEL_FILES = {"cuda": "kernel.cu", "cutlass": "kernel.cu", "triton": "kernel.py"}
EVIDENCE_FILES = ("roofline.json", "ncu_top.json", "profile.json")
SASS_NAME = "kernel.sass"
RAW_NAME = "kernel.raw.csv.gz"
RUN_RECORD = "profile_run.json"
ARCH = "sm_90a"


# ------------------------------------------------------------------------------------------------ cases


def load_cases(corpus: Path = CORPUS, only: list[str] | None = None) -> list[dict]:
    """Every case of the corpus in name order: case.json plus ``name``, ``dir``, ``kernel``, ``ref`` and
    ``split``. A case is a folder with a case.json, directly in the corpus (the selection corpus) or one
    level down (a ladder's steps, ``<ladder>/<NN_step>``, named so, whose ref.py may be the ladder's);
    ``split`` is the ladder's in the corpus's split.json ("tune" or "held_out"), else None. ``only``
    keeps the named cases (a name, its leading number, or a ladder's name for all its steps)."""
    splits: dict[str, str] = {}
    if (corpus / "split.json").is_file():
        declared = json.loads((corpus / "split.json").read_text())
        splits = {ladder: split for split in ("tune", "held_out") for ladder in declared.get(split, ())}
    cases = []
    for path in sorted([*corpus.glob("*/case.json"), *corpus.glob("*/*/case.json")]):
        folder = path.parent
        case = json.loads(path.read_text())
        ref = folder / "ref.py" if (folder / "ref.py").is_file() else folder.parent / "ref.py"
        group = folder.parent.name if folder.parent != corpus else None
        case.update(
            name=str(folder.relative_to(corpus)),
            dir=folder,
            kernel=folder / KERNEL_FILES[case["backend"]],
            ref=ref,
            ladder=case.get("ladder", group),
            split=splits.get(group) if group else None,
        )
        cases.append(case)

    def keys(case: dict) -> set[str]:  # a case's name, its leading number, its ladder
        head, _, step = case["name"].rpartition("/")
        number = step.split("_", 1)[0]
        return {case["name"], f"{head}/{number}" if head else number, *([head] if head else [])}

    if only:
        wanted = set(only)
        cases = [c for c in cases if keys(c) & wanted]
        missing = wanted - set().union(*(keys(c) for c in cases)) if cases else wanted
        if missing:
            raise SystemExit(f"no such case: {', '.join(sorted(missing))}")
    return cases


# --------------------------------------------------------------------------------------------- evidence


def compact_sass(text: str) -> str:
    """The SASS listing reduced to what kopt parses (architecture, function and instruction lines, each
    instruction without its encoding comment, whitespace collapsed); the full text when the reduced one
    would not parse to the same functions and instructions."""
    from kopt_core.sass import parse_sass
    from kopt_core.sass.verify import _ARCH, _FUNCTION, _INSTRUCTION

    kept = []
    for line in text.splitlines():
        if _ARCH.match(line) or _FUNCTION.match(line):
            kept.append(" ".join(line.split()))
        elif _INSTRUCTION.match(line):
            kept.append(" ".join(re.sub(r"/\*\s*0x[0-9a-fA-F]+\s*\*/\s*$", "", line).split()))
    reduced = "\n".join(kept) + "\n"
    return reduced if parse_sass(reduced) == parse_sass(text) else text


def keep_evidence(work: Path, evidence: Path) -> list[str]:
    """Copy what ``kopt select`` reads from a profile folder into ``evidence`` (replacing it); returns the
    names written."""
    if evidence.exists():
        shutil.rmtree(evidence)
    evidence.mkdir(parents=True)
    written = []
    for name in EVIDENCE_FILES:
        shutil.copyfile(work / name, evidence / name)
        written.append(name)
    summary = json.loads((work / "profile.json").read_text())
    sass = (summary.get("sass") or {}).get("file")
    if sass and (work / sass).is_file():
        (evidence / SASS_NAME).write_text(compact_sass((work / sass).read_text(errors="replace")))
        written.append(SASS_NAME)
        if sass != SASS_NAME:  # profile.json names the listing kopt select reads beside it
            summary["sass"]["file"] = SASS_NAME
            (evidence / "profile.json").write_text(json.dumps(summary, indent=2) + "\n")
    raw = work / "kernel.raw.csv"
    if raw.is_file():
        with raw.open("rb") as source, gzip.open(evidence / RAW_NAME, "wb", compresslevel=9) as target:
            shutil.copyfileobj(source, target)
        written.append(RAW_NAME)
    return written


def evidence_folders(case: dict) -> dict[str, Path]:
    """bundle -> the case's evidence folder holding a roofline.json and an ncu_top.json."""
    root = case["dir"] / "evidence"
    return {
        bundle: root / bundle
        for bundle in BUNDLES
        if (root / bundle / "roofline.json").is_file() and (root / bundle / "ncu_top.json").is_file()
    }


def write_archive(corpus: Path, archive: Path) -> int:
    """Every ``<case>/evidence`` folder of the corpus, as one tar.gz whose paths start with the corpus's
    path in the repository (tests/fixtures/selection/...: extract it at the repository root; a corpus
    outside the repository is packed under its own name). Returns the number of files packed."""
    corpus = corpus.resolve()
    try:
        prefix = corpus.relative_to(REPO)
    except ValueError:
        prefix = Path(corpus.name)
    archive.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with tarfile.open(archive, "w:gz") as tar:
        for folder in sorted([*corpus.glob("*/evidence"), *corpus.glob("*/*/evidence")]):
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                tar.add(path, arcname=str(prefix / path.relative_to(corpus)))
                count += 1
    return count


# ---------------------------------------------------------------------------------------------- profile


class Clock:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.start


def say(clock: Clock, text: str) -> None:
    print(f"[{clock():6.1f} s] {text}", flush=True)


def git_revision() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def profile_corpus(args: argparse.Namespace) -> int:
    from kopt_core import prepare, profile_prepared
    from kopt_core.bench.executor import WorkerExecutor
    from kopt_core.plugins import get_plugin_manager
    from kopt_core.records import BenchOptions, ProfileOptions
    from kopt_core.steps.profile import load_ceilings

    clock = Clock()
    corpus = Path(args.corpus).resolve()
    cases = load_cases(corpus, args.cases)
    bundles = tuple(args.bundles)
    ceilings = load_ceilings(args.ceilings)  # default: kopt's built-in H200 figures
    for case in cases:  # this run's evidence only: nothing of an earlier run stays beside it
        for stale in [
            *(case["dir"] / "evidence" / b for b in bundles),
            case["dir"] / "evidence" / RUN_RECORD,
        ]:
            if stale.is_dir():
                shutil.rmtree(stale)
            elif stale.exists():
                stale.unlink()
    work_root = Path(args.work or tempfile.mkdtemp(prefix="kopt-selection-"))
    records: dict[str, dict] = {
        c["name"]: {
            "case": c["name"],
            "backend": c["backend"],
            "dims": c["dims"],
            "kopt_revision": git_revision(),
            "ncu_parallel": args.ncu_parallel,
            "ceilings": args.ceilings or "kopt's built-in H200 ceilings",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "stages": {},
            "profiles": {},
            "error": None,
        }
        for c in cases
    }

    def finish(reason: str) -> int:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not cut the archive short
        for case in cases:
            record = records[case["name"]]
            folder = case["dir"] / "evidence"
            folder.mkdir(exist_ok=True)
            (folder / RUN_RECORD).write_text(json.dumps(record, indent=2, default=str) + "\n")
        profiled = sum(1 for r in records.values() for p in r["profiles"].values() if p.get("ok"))
        failed = [f"{n}: {r['error']}" for n, r in records.items() if r["error"]]
        say(clock, f"{reason}: {profiled} of {len(cases) * len(bundles)} profiles kept")
        for line in failed:
            say(clock, f"  failed {line}")
        if args.archive:
            count = write_archive(corpus, Path(args.archive))
            say(clock, f"archive {args.archive}: {count} files")
        say(clock, f"total time {clock():.1f} s")
        return 0 if not failed and profiled == len(cases) * len(bundles) else 1

    def on_term(signum, frame):  # the device's `timeout`: keep what is done
        raise KeyboardInterrupt

    previous_handler = signal.signal(signal.SIGTERM, on_term)
    try:
        pm = get_plugin_manager()
        say(clock, f"{len(cases)} cases, bundles {', '.join(bundles)}; work in {work_root}")

        # 1. builds, in parallel (nvcc runs as child processes, so threads are enough)
        def build(case):
            started = time.monotonic()
            prepared = prepare(pm, case["kernel"], case["ref"], case["dims"], backend=case["backend"])
            return prepared, time.monotonic() - started

        prepared: dict[str, object] = {}
        executor = WorkerExecutor()
        executor.start()  # torch and the CUDA context come up while nvcc runs
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {pool.submit(build, case): case for case in cases}
            for future in as_completed(futures):
                case = futures[future]
                record = records[case["name"]]
                try:
                    prepared[case["name"]], seconds = future.result()
                    record["stages"]["build_s"] = round(seconds, 2)
                except Exception as error:  # a KoptError, or anything a plugin raised
                    record["error"] = f"build: {type(error).__name__}: {error}"
                    say(clock, f"{case['name']}: {record['error']}")
        say(clock, f"built {len(prepared)} of {len(cases)}")

        # 2. check and time each once, serially, in one worker (the GPU is used by nothing else)
        options = BenchOptions(
            seeds=(0, 1), budget_s=0.3, time_reference=False, timeout_s=args.case_timeout_s
        )
        benches: dict[str, object] = {}
        try:
            for case in cases:
                name = case["name"]
                if name not in prepared:
                    continue
                started = time.monotonic()
                try:
                    result = executor.bench(prepared[name].request(options))
                except Exception as error:
                    records[name]["error"] = f"bench: {type(error).__name__}: {error}"
                    continue
                records[name]["stages"]["bench_s"] = round(time.monotonic() - started, 2)
                if result.status == "ok" and result.correctness_pass and result.timing_valid:
                    benches[name] = result
                    records[name]["median_ms"] = result.kernel_timing.median_ms
                    say(clock, f"{name}: correct, {result.kernel_timing.median_ms:.4g} ms")
                else:
                    records[name]["error"] = f"bench ({result.error_stage}): {result.error}"
                    say(clock, f"{name}: NOT profiled: {records[name]['error']}")
        finally:
            executor.close()

        # 3. ncu, --ncu-parallel at a time; each profile's evidence is kept as soon as it is written
        def profile(case, bundle):
            name = case["name"]
            out = work_root / name / bundle
            started = time.monotonic()
            outcome = profile_prepared(
                pm,
                prepared[name],
                out,
                name="kernel",
                options=ProfileOptions(
                    bundle=bundle,
                    ncu_timeout_s=args.case_timeout_s,
                    full_timeout_s=args.case_timeout_s,
                    ceilings=ceilings,
                ),
                bench=benches[name],
            )
            kept = keep_evidence(out, case["dir"] / "evidence" / bundle)
            # the import of the raw CSV just written, with the same kernel, reference and dims: the same
            # evidence and selection as the live profile (issue 27), checked while the profile is fresh
            try:
                with tempfile.TemporaryDirectory(prefix="kopt-import-parity-") as scratch:
                    parity = import_parity(case, case["dir"] / "evidence" / bundle, Path(scratch))
            except Exception as error:  # the check failing is recorded, the live evidence still kept
                parity = {"same": False, "differs": [f"import failed: {type(error).__name__}: {error}"]}
            return outcome, kept, time.monotonic() - started, parity

        # every case's first bundle before any case's second: a deadline leaves whole bundles behind
        jobs = [(case, bundle) for bundle in bundles for case in cases if case["name"] in benches]
        pool = ThreadPoolExecutor(max_workers=args.ncu_parallel)
        try:
            futures = {}
            pending = list(jobs)
            while pending or futures:
                while pending and len(futures) < args.ncu_parallel:
                    case, bundle = pending.pop(0)
                    if clock() > args.deadline_s:
                        records[case["name"]]["profiles"][bundle] = {"ok": False, "error": "deadline passed"}
                        continue
                    futures[pool.submit(profile, case, bundle)] = (case, bundle)
                if not futures:
                    break
                future = next(as_completed(futures))
                case, bundle = futures.pop(future)
                entry: dict = {"ok": False}
                try:
                    outcome, kept, seconds, parity = future.result()
                    summary = outcome.summary
                    entry = {
                        "ok": True,
                        "bundle": summary.bundle,
                        "bundle_reason": summary.bundle_reason,
                        "kernels": len(summary.kernels),
                        "ncu_duration_ms": summary.ncu_duration_ms,
                        "ncu_seconds": summary.ncu_seconds,
                        "seconds": round(seconds, 2),
                        "files": kept,
                        "bound": outcome.roofline.bound,
                        "label": outcome.roofline.label,
                        "import_parity": parity,
                    }
                    say(
                        clock,
                        f"{case['name']} [{bundle}]: {summary.bundle} set, {len(summary.kernels)} kernel(s), "
                        f"bound {outcome.roofline.bound}, {seconds:.1f} s",
                    )
                except Exception as error:
                    entry["error"] = f"{type(error).__name__}: {error}"
                    records[case["name"]]["error"] = f"profile {bundle}: {entry['error']}"
                    say(clock, f"{case['name']} [{bundle}]: {entry['error']}")
                records[case["name"]]["profiles"][bundle] = entry
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)  # running profiles are abandoned below
            raise
        pool.shutdown(wait=True)
        return finish("done")
    except KeyboardInterrupt:
        code = finish("interrupted") or 1
        if not args.work and not args.keep_work:
            shutil.rmtree(work_root, ignore_errors=True)
        sys.stdout.flush()
        os._exit(code)  # profiles still running in pool threads are abandoned (their ncu runs too)
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if not args.work and not args.keep_work:
            shutil.rmtree(work_root, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ score


def judge(labels: dict, selected: list[str]) -> dict:
    """hit: every must group has a selected method; wasted: the selected methods on the waste list; the
    must groups that no selected method satisfied."""
    chosen = set(selected)
    missed = [group for group in labels["must"] if not chosen.intersection(group)]
    return {
        "hit": not missed,
        "missed": missed,
        "wasted": [m for m in selected if m in set(labels["waste"])],
    }


def rates(rows: list[dict]) -> dict:
    """hit rate = hits / rows; waste rate = wasted slots / selected slots (0 when nothing was selected)."""
    selected = sum(len(r["selected"]) for r in rows)
    wasted = sum(len(r["wasted"]) for r in rows)
    return {
        "profiles": len(rows),
        "hits": sum(1 for r in rows if r["hit"]),
        "hit_rate": (sum(1 for r in rows if r["hit"]) / len(rows)) if rows else None,
        "selected": selected,
        "wasted": wasted,
        "waste_rate": (wasted / selected) if selected else 0.0,
    }


def reimport(case: dict, folder: Path, scratch: Path) -> Path:
    """The kept raw CSV analysed again by this kopt as ``kopt profile --import RAW KERNEL --ref REF
    --sass SASS DIMS`` does (the kernel and the reference give the buffers and the workload model, the
    kept listing the SASS); returns the folder holding the new roofline.json, ncu_top.json and
    profile.json. Only for a kernel whose inputs its setup() makes are the buffers the kept profile.json's
    (a bench's, which no static reading can know)."""
    from kopt_core import profile_standalone

    raw = scratch / "kernel.raw.csv"
    with gzip.open(folder / RAW_NAME, "rb") as source, raw.open("wb") as target:
        shutil.copyfileobj(source, target)
    out = scratch / "reimported"
    sass = folder / SASS_NAME
    profile_standalone(
        case["kernel"] if Path(case["kernel"]).is_file() else None,  # without it: the reference's buffers
        case["ref"],
        case["dims"],
        import_path=raw,
        out_dir=out,
        backend=case["backend"],
        sass=sass if sass.is_file() else None,
    )
    again = json.loads((out / "profile.json").read_text())
    kept = json.loads((folder / "profile.json").read_text())
    if not again.get("buffers") and kept.get("buffers"):
        # the buffers and the default workload model built on them, as the live profile recorded them
        again["buffers"] = kept["buffers"]
        if again.get("workload") is None:
            again["workload"] = kept.get("workload")
        (out / "profile.json").write_text(json.dumps(again, indent=2) + "\n")
    return out


def import_parity(case: dict, live: Path, scratch: Path, *, arch: str = ARCH) -> dict:
    """Does the import of a live profile's raw CSV (``reimport``) give the same ncu_top.json (but for its
    bundle_reason, which says where it came from), roofline.json and selection as the live profile in
    ``live``? {"same": bool, "differs": [names]}."""
    from kopt_core import select_standalone

    again = reimport(case, live, scratch)
    differs = []
    for name in ("ncu_top.json", "roofline.json"):
        a, b = json.loads((live / name).read_text()), json.loads((again / name).read_text())
        a.pop("bundle_reason", None)
        b.pop("bundle_reason", None)
        if a != b:
            differs.append(
                f"{name}: " + ", ".join(sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))
            )
    picks = []
    for source in (live, again):
        methods = select_standalone(
            source / "roofline.json",
            source / "ncu_top.json",
            arch=arch,
            backend=case["backend"],
            out_dir=scratch / f"selection_{len(picks)}",
        )
        picks.append([m["id"] for m in json.loads(methods.read_text())["selected"]])
    if picks[0] != picks[1]:
        differs.append(f"selection: live {picks[0]}, imported {picks[1]}")
    return {"same": not differs, "differs": differs}


def refresh_corpus(corpus: Path = CORPUS, only: list[str] | None = None) -> int:
    """Analyse every kept raw CSV again with this kopt and write the evidence kopt select reads
    (roofline.json, ncu_top.json, profile.json) back beside it; returns the folders refreshed."""
    count = 0
    for case in load_cases(corpus, only):
        for bundle, folder in evidence_folders(case).items():
            if not (folder / RAW_NAME).is_file():
                continue
            with tempfile.TemporaryDirectory(prefix="kopt-selection-refresh-") as scratch:
                kept = json.loads((folder / "ncu_top.json").read_text())
                fresh = reimport(case, folder, Path(scratch))
                for name in EVIDENCE_FILES:
                    shutil.copy(fresh / name, folder / name)
                # the bundle ncu ran with, not "imported": the analysis is new, the measurement is not
                again = json.loads((folder / "ncu_top.json").read_text())
                again["bundle"] = kept["bundle"]
                again["bundle_reason"] = kept["bundle_reason"]
                (folder / "ncu_top.json").write_text(json.dumps(again, indent=2) + "\n")
            count += 1
            print(f"{case['name']} [{bundle}]: refreshed", flush=True)
    return count


def score_case(case: dict, bundle: str, folder: Path, *, arch: str = ARCH, again: bool = False) -> dict:
    from kopt_core import select_standalone

    with tempfile.TemporaryDirectory(prefix="kopt-selection-score-") as scratch:
        source = reimport(case, folder, Path(scratch)) if again else folder
        sass = folder / SASS_NAME
        methods = select_standalone(
            source / "roofline.json",
            source / "ncu_top.json",
            arch=arch,
            backend=case["backend"],
            dtypes=(case["dtype"],),
            sass_path=sass if sass.is_file() else None,
            out_dir=Path(scratch) / "selection",
        )
        selection = json.loads(methods.read_text())
        roofline = json.loads((source / "roofline.json").read_text())
    selected = [m["id"] for m in selection["selected"]]
    reasons = {m["id"]: m["reason"] for m in selection.get("skipped", [])}
    return {
        "reasons": reasons,  # why the scan left each method out: skip rule, trigger, budget
        "work_kind": selection.get("work_kind"),
        "kernel_tags": selection.get("kernel_tags"),
        "case": case["name"],
        "ladder": case.get("ladder"),
        "split": case.get("split"),
        "bundle": bundle,
        "backend": case["backend"],
        "kind": case["kind"],
        "bound": roofline.get("bound"),
        "label": roofline.get("label"),
        "budget": selection.get("budget"),
        "selected": selected,
        **judge(case["labels"], selected),
    }


def score_corpus(
    corpus: Path = CORPUS, *, arch: str = ARCH, only: list[str] | None = None, again: bool = False
) -> dict:
    """Every evidence folder of the corpus scored; ``rows`` (one per case and bundle), ``without_evidence``
    (case names), ``errors`` (case, bundle, message) and the rates per bundle and over all."""
    rows, errors, without = [], [], []
    unlabelled = []
    for case in load_cases(corpus, only):
        folders = evidence_folders(case)
        if not case.get("labels"):  # a ladder's last step: nothing comes after it to label it with
            unlabelled.append(case["name"])
            continue
        if not folders:
            without.append(case["name"])
        for bundle, folder in folders.items():
            try:
                rows.append(score_case(case, bundle, folder, arch=arch, again=again))
            except Exception as error:  # one bad folder is reported, the others still scored
                errors.append(
                    {"case": case["name"], "bundle": bundle, "error": f"{type(error).__name__}: {error}"}
                )
    return {
        "arch": arch,
        "rows": rows,
        "without_evidence": without,
        "unlabelled": unlabelled,
        "errors": errors,
        "rates": {
            "all": rates(rows),
            **{bundle: rates([r for r in rows if r["bundle"] == bundle]) for bundle in BUNDLES},
        },
        # ladders: each split and each ladder, over both bundles and per bundle
        "by_split": {
            split: {
                "all": rates([r for r in rows if r["split"] == split]),
                **{b: rates([r for r in rows if r["split"] == split and r["bundle"] == b]) for b in BUNDLES},
            }
            for split in sorted({r["split"] for r in rows if r["split"]})
        },
        "by_ladder": {
            ladder: {
                "all": rates([r for r in rows if r["ladder"] == ladder]),
                **{
                    b: rates([r for r in rows if r["ladder"] == ladder and r["bundle"] == b]) for b in BUNDLES
                },
            }
            for ladder in sorted({r["ladder"] for r in rows if r["ladder"]})
        },
    }


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def render_table(result: dict, *, markdown: bool) -> str:
    header = ["case", "bundle", "bound", "selected", "hit", "wasted", "missed groups"]
    lines = []
    for row in result["rows"]:
        lines.append(
            [
                row["case"],
                row["bundle"],
                str(row["bound"]),
                ", ".join(row["selected"]) or "-",
                "yes" if row["hit"] else "NO",
                ", ".join(row["wasted"]) or "-",
                "; ".join("/".join(group) for group in row["missed"]) or "-",
            ]
        )
    totals = []
    for name, r in result["rates"].items():
        if r["profiles"]:
            totals.append(
                f"{name}: hit rate {percent(r['hit_rate'])} ({r['hits']}/{r['profiles']}), waste rate "
                f"{percent(r['waste_rate'])} ({r['wasted']}/{r['selected']} selected slots)"
            )
    for group in ("by_split", "by_ladder"):
        for key, by_bundle in result.get(group, {}).items():
            for bundle, r in by_bundle.items():
                if r["profiles"]:
                    totals.append(
                        f"{key} [{bundle}]: hit rate {percent(r['hit_rate'])} ({r['hits']}/{r['profiles']}), "
                        f"waste rate {percent(r['waste_rate'])} ({r['wasted']}/{r['selected']})"
                    )
    notes = []
    if result.get("unlabelled"):
        notes.append(f"last steps, not scored: {', '.join(result['unlabelled'])}")
    if result["without_evidence"]:
        notes.append(f"no evidence: {', '.join(result['without_evidence'])}")
    notes += [f"error {e['case']} [{e['bundle']}]: {e['error']}" for e in result["errors"]]
    if markdown:
        out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(cells) + " |" for cells in lines]
        out += [""] + [f"- {t}" for t in totals + notes]
        return "\n".join(out) + "\n"
    widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in lines]
    return "\n".join(out + [""] + totals + notes) + "\n"


def render_misses(result: dict) -> str:
    """Every miss, as markdown: per missed group, each of its methods and why the scan left it out (its
    skip rule, the trigger with the values measured, the budget, or no such method in the registry),
    with the kind of work and the kernel's traits the scan read."""
    from kopt_core.knowledge.methods import load_methods

    known = {m.id for m in load_methods().methods}
    out = [
        "| case | bundle | bound | work kind | selected | missed method: why the scan left it out |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        if row["hit"]:
            continue
        why = []
        for group in row["missed"]:
            for method in group:
                reason = row["reasons"].get(method) or (
                    "not a method of the registry" if method not in known else "not considered"
                )
                why.append(f"`{method}`: {reason}")
        out.append(
            f"| `{row['case']}` | {row['bundle']} | {row['bound']} | {row.get('work_kind')} | "
            f"{', '.join(row['selected']) or '-'} | " + "<br>".join(why).replace("|", "/") + " |"
        )
    return "\n".join(out) + "\n"


def score_command(args: argparse.Namespace) -> int:
    result = score_corpus(Path(args.corpus), arch=args.arch, only=args.cases, again=args.reimport)
    print(render_table(result, markdown=False), end="")
    if args.misses:
        Path(args.misses).write_text(render_misses(result))
    if args.markdown:
        Path(args.markdown).write_text(render_table(result, markdown=True))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 1 if result["errors"] else 0


# ------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    profile = commands.add_parser("profile", help="profile every case on this GPU and keep the evidence")
    score = commands.add_parser("score", help="score kopt's selection on the kept evidence")
    refresh = commands.add_parser(
        "refresh", help="analyse the kept raw CSVs again with this kopt and write the evidence back"
    )
    for sub in (profile, score, refresh):
        sub.add_argument("--corpus", default=str(CORPUS), help="the corpus folder (default: %(default)s)")
        sub.add_argument(
            "--cases",
            type=lambda s: [c for c in s.split(",") if c],
            help="only these cases (names or numbers)",
        )
    profile.add_argument("--bundles", type=lambda s: s.split(","), default=list(BUNDLES))
    profile.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="parallel builds")
    profile.add_argument(
        "--ncu-parallel", type=int, default=3, help="ncu runs at a time (1: strictly serial)"
    )
    profile.add_argument("--case-timeout-s", type=float, default=120.0, help="limit of one bench or ncu run")
    profile.add_argument("--deadline-s", type=float, default=480.0, help="no profile starts after this")
    profile.add_argument("--ceilings", help="device ceilings JSON (default: kopt's built-in H200 figures)")
    profile.add_argument("--archive", help="write every evidence folder into this tar.gz")
    profile.add_argument("--work", help="profile folders here (kept) instead of a temporary folder")
    profile.add_argument("--keep-work", action="store_true", help="keep the temporary profile folders")
    score.add_argument("--arch", default=ARCH)
    score.add_argument("--markdown", help="also write the table as markdown here")
    score.add_argument("--json", help="also write the result as JSON here")
    score.add_argument("--misses", help="write every miss and why the scan left each method out (markdown)")
    score.add_argument("--reimport", action="store_true", help="analyse the kept raw CSV again first")
    args = parser.parse_args(argv)
    if args.command == "profile":
        for bundle in args.bundles:
            if bundle not in BUNDLES:
                parser.error(f"--bundles: {bundle!r} is not one of {', '.join(BUNDLES)}")
        return profile_corpus(args)
    if args.command == "refresh":
        count = refresh_corpus(Path(args.corpus), args.cases)
        print(f"{count} evidence folders refreshed")
        return 0
    return score_command(args)


if __name__ == "__main__":
    sys.exit(main())
