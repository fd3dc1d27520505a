"""The ``kopt`` command line: thin commands over kopt_core's functions.

``kopt_core.cli.app`` is the click application (the group, how a command line ends, the shared options);
each command module (bench, profiling, gate, selection, sass, run, loop, optimize, search, inventory)
registers its commands on it, and ``kopt_core.cli.commands`` imports them all. ``main`` is the ``kopt``
console script (kopt_core/pyproject.toml) and ``python -m kopt_core.cli``.

Exit codes (docs/loop.md): 0 ok, 2 no valid kernel, 3 hardware/tool failure, 4 bad kernel file,
reference or dims. Click's own usage errors are configuration errors (4), never 2.
"""

from __future__ import annotations

from kopt_core.cli.commands import cli, main

__all__ = ["cli", "main"]
