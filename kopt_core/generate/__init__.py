"""Generators: who writes an iteration's candidate kernels (docs/loop.md, step 3d).

A generator is registered by a plugin (``kopt_register_generators``) and dispatched by name. The core
writes the iteration's brief (``iterv{i}/brief.md``, ``brief.json``), calls the generator, and validates
what it wrote with the strict candidates.json loader. Built in, through entry points in the group
``kopt`` like any third-party generator:

- ``agent`` (``kopt_core.generate.agent``): writes the brief and waits for an agent to write the files;
- ``command`` (``kopt_core.generate.command``): runs the user's command in the iteration folder.

What a generator registers, is given and answers are records (``kopt_core.records.generate``, also
exported by ``kopt_core``); docs/plugins.md, "Writing a generator", walks through the contract.
"""

from __future__ import annotations

from kopt_core.generate.base import GeneratorRegistry, check_options, generator_for, resume_command
from kopt_core.generate.brief import Brief, build_brief, render_brief, write_brief
from kopt_core.generate.step import generate_in_run, generation_context

__all__ = [
    "Brief",
    "GeneratorRegistry",
    "build_brief",
    "check_options",
    "generate_in_run",
    "generation_context",
    "generator_for",
    "render_brief",
    "resume_command",
    "write_brief",
]
