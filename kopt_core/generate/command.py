"""The ``command`` generator: run the user's command once per iteration to write the candidates.

The command is an argv list (``command``: a JSON list of strings), never a shell string: ``;``, ``|`` or
``$x`` in an argument reach the program as written. It runs in the iteration folder, with the run's
facts in its environment, and its stdout and stderr go to ``iterv{i}/generator.log``. A timeout (option
``timeout_s``, default 3600 s) kills its whole process group. It has succeeded only if it exited 0 and
wrote candidates.json; the core then validates that file strictly.

Environment given to the command (besides kopt's own):

    KOPT_RUN        the run folder
    KOPT_ITER       the iteration number
    KOPT_ITER_DIR   the iteration folder (also the working directory)
    KOPT_BRIEF      brief.md
    KOPT_BRIEF_JSON brief.json
    KOPT_K          how many branches to write
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from kopt_core.bench.executor import shared_executor
from kopt_core.errors import ConfigError
from kopt_core.plugins import hookimpl
from kopt_core.process import run_in_group
from kopt_core.records.generate import GenerationContext, GenerationResult, GeneratorInfo
from kopt_core.run.layout import GENERATOR_LOG

NAME = "command"
DEFAULT_TIMEOUT_S = 3600.0
TAIL_LINES = 20
OPTIONS = {
    "command": 'the command as a JSON list of strings, e.g. ["python3", "gen.py", "--fast"] (required)',
    "timeout_s": f"seconds before the command's process group is killed (default {DEFAULT_TIMEOUT_S:g})",
}


def parse_command(options: dict[str, str]) -> list[str]:
    """The argv of option ``command`` (ConfigError, exit 4, when it is missing or not a list of strings)."""
    raw = options.get("command")
    shape = 'give it as a JSON list of strings, e.g. command=\'["python3", "gen.py"]\''
    if raw is None or not raw.strip():
        raise ConfigError("the command generator needs its command (option command)", hint=shape)
    try:
        argv = json.loads(raw)
    except json.JSONDecodeError:
        raise ConfigError(f"option command {raw!r} is not a JSON list", hint=shape) from None
    if not isinstance(argv, list) or not argv or not all(isinstance(arg, str) for arg in argv):
        raise ConfigError(f"option command {raw!r} is not a non-empty JSON list of strings", hint=shape)
    if not argv[0]:
        raise ConfigError("option command names an empty program", hint=shape)
    return argv


def parse_timeout(options: dict[str, str]) -> float:
    raw = options.get("timeout_s")
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"option timeout_s {raw!r} is not a positive number of seconds")
    return seconds


def check(options: dict[str, str]) -> None:
    parse_command(options)
    parse_timeout(options)


def command_env(context: GenerationContext) -> dict[str, str]:
    return {
        **os.environ,
        "KOPT_RUN": str(context.run_dir),
        "KOPT_ITER": str(context.iteration),
        "KOPT_ITER_DIR": str(context.iteration_dir),
        "KOPT_BRIEF": str(context.brief_md),
        "KOPT_BRIEF_JSON": str(context.brief_json),
        "KOPT_K": str(context.k),
    }


def _stamp(path: Path) -> tuple[int, int] | None:
    """What tells a rewritten file from the one left before (None: there is none)."""
    try:
        status = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return (status.st_mtime_ns, status.st_ino)


def log_tail(log: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no output)"
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(kept)[-2000:] if kept else "(no output)"


def generate(context: GenerationContext) -> GenerationResult:
    argv = parse_command(context.options)
    timeout_s = parse_timeout(context.options)
    log = context.iteration_dir / GENERATOR_LOG
    before = _stamp(context.candidates_file)
    # The command may run for a long time and use the GPU itself (an agent timing its own drafts): the
    # process's idle bench worker would hold a CUDA context and device memory all along. Explore starts
    # another, during its builds.
    shared_executor.close()
    ran = run_in_group(
        argv,
        timeout_s=timeout_s,
        env=command_env(context),
        log_path=log,
        cwd=context.iteration_dir,
        stdin=subprocess.DEVNULL,  # a batch command: waiting on kopt's input would only hang it
    )
    shown = " ".join(argv)
    tail = f"last output ({log}):\n{log_tail(log)}"
    if ran.error:
        return GenerationResult(
            status="failed", message=f"could not start {shown}: {ran.error}", paths=(log,)
        )
    if ran.timed_out:
        return GenerationResult(
            status="failed",
            message=f"{shown} ran past its timeout ({timeout_s:g} s): its process group was killed; {tail}",
            paths=(log,),
        )
    if ran.returncode != 0:
        code = ran.returncode or 0
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return GenerationResult(status="failed", message=f"{shown} {how}; {tail}", paths=(log,))
    after = _stamp(context.candidates_file)
    if after is None or after == before:
        nothing = "wrote no candidates.json" if after is None else "left candidates.json as it was"
        return GenerationResult(
            status="failed",
            message=f"{shown} exited 0 but {nothing} in {context.iteration_dir}: nothing was written; {tail}",
            paths=(log,),
        )
    return GenerationResult(
        status="written",
        message=f"{shown} wrote {context.candidates_file} in {ran.seconds:.1f} s",
        paths=(log, context.candidates_file),
    )


@hookimpl
def kopt_register_generators(register: Callable[[GeneratorInfo], None]) -> None:
    register(
        GeneratorInfo(
            name=NAME,
            description="runs your command (an argv list) in the iteration folder with the brief; it "
            "writes the candidates",
            generate=generate,
            options=OPTIONS,
            check=check,
        )
    )
