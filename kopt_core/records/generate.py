"""The generator seam's records: what a generator plugin registers (``GeneratorInfo``), what it is given
(``GenerationContext``) and what it answers (``GenerationResult``); docs/plugins.md, "Writing a
generator".

A generator writes one iteration's candidates (docs/loop.md, step 3d): ``branches/b{n}/kernel<suffix>``
for n in 1..K, ``ablations/<method>/kernel<suffix>`` for each selected method, and candidates.json. A
plugin registers ``GeneratorInfo(name, description, generate)`` through ``kopt_register_generators``;
the core writes the iteration's brief, calls ``generate(context)`` on the generator the run names, and
checks whatever it wrote with the strict candidates.json loader (``GenerationContext.load_candidates``).
A generator never decides for itself that its kernels are acceptable.

These are plain data: the core (``kopt_core.generate.step.generation_context``) fills in the context's
paths and names from the run folder's layout and binds its loader to the iteration.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from attrs import field, frozen
from attrs.validators import in_

from kopt_core.records.fields import as_tuple
from kopt_core.records.loop import Candidates
from kopt_core.records.state import State

GenerationStatus = Literal["written", "awaiting", "failed"]
GENERATION_STATUSES: tuple[str, ...] = ("written", "awaiting", "failed")


@frozen
class GenerationContext:
    """What a generator is given: one opened iteration whose methods are selected. Paths are absolute.

    Every candidate file is named ``kernel_file`` (``kernel<suffix>``) in its own folder (``branch_file``,
    ``ablation_file``); ``suffixes`` are all the backend takes, which the loader accepts."""

    run_dir: Path
    iteration: int
    iteration_dir: Path
    state: State
    k: int  # branches wanted: b1..bK
    methods: tuple[str, ...] = field(converter=as_tuple)  # the iteration's methods (methods.json)
    backend: str
    suffix: str  # the best kernel's suffix (".cu", ".py"): candidates are written in its language
    suffixes: tuple[str, ...] = field(converter=as_tuple)
    brief_md: Path
    brief_json: Path
    generator: str  # the name of the generator being run
    candidates_file: Path  # the iteration's candidates.json
    resume_command: str  # the command that continues the run after its candidates were written
    branches_dir: str  # the folder of the branches, relative to the iteration folder ("branches")
    ablations_dir: str  # the folder of the ablations, relative to the iteration folder ("ablations")
    kernel_file: str  # what every candidate's file is called in its own folder ("kernel" + suffix)
    # The strict candidates.json loader, bound to this iteration (its methods, the backend's suffixes, k).
    candidates_loader: Callable[[], Candidates] = field(eq=False, repr=False)
    options: dict[str, str] = field(factory=dict)  # free-form, from the command line

    def branch_file(self, n: int) -> str:
        """Branch ``b{n}``'s kernel, relative to the iteration folder (as candidates.json names it)."""
        return f"{self.branches_dir}/b{n}/{self.kernel_file}"

    def ablation_file(self, method: str) -> str:
        """The ablation of ``method``, relative to the iteration folder."""
        return f"{self.ablations_dir}/{method}/{self.kernel_file}"

    def load_candidates(self) -> Candidates:
        """The iteration's candidates.json through the strict loader (ConfigError, exit 4, naming every
        problem and its fix)."""
        return self.candidates_loader()


def _paths(items: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    return tuple(str(item) for item in items)


@frozen
class GenerationResult:
    """A generator's answer.

    - ``written``: candidates.json and its kernels are on disk; the core validates them, then the run goes
      on to explore.
    - ``awaiting``: someone else writes them (an agent); the run waits, and continues with
      ``kopt optimize --resume RUN``.
    - ``failed``: nothing usable was written; ``message`` says why, and the run stops (exit 2).
    """

    status: GenerationStatus = field(validator=in_(GENERATION_STATUSES))
    message: str = ""
    paths: tuple[str, ...] = field(default=(), converter=_paths)  # what was written, absolute
    candidates: Candidates | None = None  # set by the core once candidates.json validated


GenerateFn = Callable[[GenerationContext], GenerationResult]
CheckFn = Callable[[dict[str, str]], None]


@frozen
class GeneratorInfo:
    """What a generator plugin registers through ``kopt_register_generators``."""

    name: str  # --generator NAME
    description: str  # one line for listings
    generate: GenerateFn = field(eq=False)
    # The options it reads from ``GenerationContext.options``, each with a line of help. Any other key is
    # refused before the run starts (a typo must not be ignored for an hour).
    options: dict[str, str] = field(factory=dict)
    # Checks the options' values before the run starts; raises ConfigError (exit 4) naming the option.
    check: CheckFn | None = field(default=None, eq=False)
    # Whether its iterations select methods to implement. False for a generator that implements none (a
    # parameter search tunes the kernel's declared tunables): the loop then selects no method, and the
    # scan's own picks are kept beside the empty selection as advice not taken.
    selects_methods: bool = True
