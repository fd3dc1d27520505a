"""Every ``kopt`` command, registered: importing the command modules puts their commands on the group
that kopt_core.cli.app defines. The package's ``main`` (the ``kopt`` console script) is this one."""

from __future__ import annotations

from kopt_core.cli import (  # noqa: F401 - each module registers its commands on app.cli
    app,
    bench,
    campaign,
    gate,
    inventory,
    loop,
    optimize,
    profiling,
    run,
    sass,
    search,
    selection,
)

cli = app.cli


def main() -> None:
    cli.main()
