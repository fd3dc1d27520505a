"""The ``agent`` generator: an agent (or a person) writes the candidates, and the run waits for it.

It writes nothing but the brief (the core writes that before calling it) and answers ``awaiting`` with
what to write and the command that continues the run. Called again once candidates.json exists (the
agent wrote the files, then resumed), it answers ``written`` when the file validates, and raises the
loader's ConfigError (exit 4, every problem with its fix) when it does not, so the run keeps waiting.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from kopt_core.plugins import hookimpl
from kopt_core.records.generate import GenerationContext, GenerationResult, GeneratorInfo

NAME = "agent"


def generate(context: GenerationContext) -> GenerationResult:
    if os.path.lexists(context.candidates_file):
        candidates = context.load_candidates()
        return GenerationResult(
            status="written",
            message=(
                f"{context.candidates_file} validates: {len(candidates.branches)} branches and "
                f"{len(candidates.ablations)} ablations by {candidates.generator}"
            ),
            paths=(context.candidates_file,),
            candidates=candidates,
        )
    ablations = (
        f"one ablation per method ({', '.join(context.methods)}) as ablations/<method>/kernel{context.suffix}"
        if context.methods
        else "no ablations (no method was selected)"
    )
    return GenerationResult(
        status="awaiting",
        message=(
            f"iteration {context.iteration} awaits its candidates: read {context.brief_md}, then write "
            f"{context.k} branches as branches/b1..b{context.k}/kernel{context.suffix}, {ablations}, and "
            f"candidates.json, all in {context.iteration_dir}; then run: {context.resume_command}"
        ),
        paths=(context.brief_md, context.brief_json),
    )


@hookimpl
def kopt_register_generators(register: Callable[[GeneratorInfo], None]) -> None:
    register(
        GeneratorInfo(
            name=NAME,
            description="writes the brief and waits: a coding agent or a person writes the candidates, "
            "then continues the run with kopt optimize --resume",
            generate=generate,
        )
    )
