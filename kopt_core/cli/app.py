"""The click application: the ``kopt`` group, how a command line ends (exit code, the --json envelope of a
failure) and what the command modules share (option types, shared options, the plugin manager, a run's
store). The commands register themselves on ``cli`` from their own modules (kopt_core.cli.commands
imports them all); this module imports none of them.

Exit codes (docs/loop.md): 0 ok (and a bare ``kopt``, which prints the help), 1 kopt's own failure, 2 no
valid kernel, 3 hardware/tool failure, 4 bad kernel file, reference or dims, 130 interrupted (Ctrl-C).
Click's own usage errors are configuration errors (4), never 2.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import click

from kopt_core import __version__, progress
from kopt_core.cli import envelope, outputs, render
from kopt_core.errors import EXIT_CONFIG, EXIT_INTERRUPTED, KoptError
from kopt_core.records.state import SANITIZER_TIMEOUT_S, State
from kopt_core.run.init import NUMERICS_MODES

F = TypeVar("F", bound=Callable[..., Any])

# Every command takes these context settings when it reads dims as free --NAME=VALUE arguments.
FREE_ARGUMENTS = {"ignore_unknown_options": True, "allow_extra_args": True}
# ctx.meta's key for the words after "--" (KoptCommand), None when there was no "--".
AFTER_DOUBLE_DASH = "kopt.after_double_dash"


def default_of(record: type, name: str) -> Any:
    """The default of the record field ``name``: a click default that mirrors a record's field reads it
    here, so the two cannot drift."""
    default = attrs.fields_dict(record)[name].default
    factory = getattr(default, "factory", None)  # a field(factory=...): the value it makes
    return factory() if callable(factory) else default


class KoptCommand(click.Command):
    """A kopt command. One that reads dims as free ``--NAME=VALUE`` words (``FREE_ARGUMENTS``) refuses a
    word whose NAME is one of its own options misspelt: ``--arhc=sm_80`` would otherwise become a dim
    named arhc, and the --arch asked for would silently not be used. A dim whose name is that close to an
    option goes in ``--dims``, which is never checked against the options."""

    takes_argv = False

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # For a command that takes a program after "--" (``takes_argv``: kopt optimize's command
        # generator), the words after the first "--" are kept apart, as written: click would take them as
        # more free words, and a dim parser would refuse them. Elsewhere "--" only ends the options.
        if self.takes_argv and "--" in args:
            cut = args.index("--")
            args, ctx.meta[AFTER_DOUBLE_DASH] = args[:cut], list(args[cut + 1 :])
        rest = super().parse_args(ctx, args)
        if ctx.ignore_unknown_options:
            self._refuse_misspelt_options(ctx)
        return rest

    def _free_words(self, ctx: click.Context) -> list[str]:
        """The words click left to the command: its extra arguments and an ``nargs=-1`` argument's."""
        words = [str(word) for word in ctx.args]
        for param in self.params:
            if isinstance(param, click.Argument) and param.nargs == -1 and param.name:
                words += [str(word) for word in ctx.params.get(param.name) or ()]
        return words

    def _refuse_misspelt_options(self, ctx: click.Context) -> None:
        from kopt_core.dims import misspelt_option, word_names

        options = [
            opt[2:]
            for param in self.get_params(ctx)
            if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)
            if opt.startswith("--")
        ]
        for name in word_names(self._free_words(ctx)):
            option = misspelt_option(name, options)
            if option is not None:
                raise click.UsageError(
                    f"no such option --{name}: did you mean --{option}? (a dim named {name} goes in "
                    f"--dims '{{\"{name}\": VALUE}}')",
                    ctx=ctx,
                )


class KoptGroup(click.Group):
    command_class = KoptCommand  # every command of the group (and of its subgroups) is a KoptCommand
    group_class = type  # a subgroup (``kopt iter``) is a KoptGroup too
    # The root group also offers the commands plugins register (``kopt_register_commands``), loaded the
    # first time a name is not one of kopt's own (or the commands are listed): kopt's own commands never
    # wait for the plugins, and a plugin's command never shadows one of them.
    takes_plugin_commands = False

    def _plugin_commands(self) -> dict[str, click.Command]:
        if not self.takes_plugin_commands:
            return {}
        # kept per manager factory (tests replace ``plugin_manager``), found once per process otherwise
        caches: dict[Any, dict[str, click.Command]] = self.__dict__.setdefault("_plugin_caches", {})
        factory = plugin_manager
        if factory not in caches:
            found: dict[str, click.Command] = {}
            for command in registered_commands(factory()):
                if command.name and command.name not in self.commands:
                    found.setdefault(command.name, command)
            caches[factory] = found
        return caches[factory]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self._plugin_commands().get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._plugin_commands()})

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # A group named without a command (a bare ``kopt``, ``kopt iter``) prints its help on stdout and
        # exits 0, on every click this package allows (click 8.2 made it a usage error).
        if not args and self.no_args_is_help and not ctx.resilient_parsing:
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit()
        return super().parse_args(ctx, args)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        outputs.USER_OUTPUTS.clear()  # the outputs this command line chose, for the OSError below
        raw = list(sys.argv[1:] if args is None else args)
        as_json = envelope.wants_json(raw)
        failure: dict | None = None
        # what kopt is doing, on stderr while it builds, profiles or times: a status line on a terminal, a
        # line per step elsewhere (stdout stays the envelope's alone with --json)
        shown_before = progress.install(render.status_line())
        try:
            code = super().main(
                args=args,
                prog_name=prog_name or "kopt",
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
        except (KeyboardInterrupt, click.exceptions.Abort) as exc:
            # click turns Ctrl-C (and an end of input at a prompt) into Abort, the interrupt as its cause
            interrupted = isinstance(exc, KeyboardInterrupt) or isinstance(exc.__cause__, KeyboardInterrupt)
            message = "interrupted" if interrupted else "aborted"
            render.error(message)
            code = EXIT_INTERRUPTED if interrupted else 1
            failure = envelope.error_data("Interrupted" if interrupted else "Abort", message)
        except click.ClickException as exc:  # usage errors: a bad command line is a configuration error
            exc.show()
            code = EXIT_CONFIG
            failure = envelope.error_data("UsageError", exc.format_message())
        except KoptError as exc:
            render.error(str(exc))
            code = exc.exit_code
            failure = envelope.kopt_error(exc)
        except OSError as exc:  # a path the system refused: the user's --out (exit 4) or kopt's own (1)
            message, code = outputs.os_error(exc)
            render.error(message)
            failure = envelope.error_data("ConfigError" if code == EXIT_CONFIG else "OSError", message)
        progress.install(shown_before)
        if failure is not None and as_json:  # the command printed nothing: the failure is the envelope
            envelope.emit(envelope.command_of(self, raw), code, None, failure)
        if not standalone_mode:
            return code
        sys.exit(code or 0)


@click.group(cls=KoptGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kopt")
def cli() -> None:
    """kopt: make GPU kernels faster with evidence instead of guesswork."""


cli.takes_plugin_commands = True


def registered_commands(pm) -> list[click.Command]:
    """The click commands the plugins register, in registration order (a plugin that fails while
    registering is left out: its failure is kopt plugins' to show, not every command's)."""
    commands: list[click.Command] = []

    def register(command: click.Command) -> None:
        if not isinstance(command, click.Command):
            raise TypeError(f"kopt_register_commands: {command!r} is not a click command")
        commands.append(command)

    pm.hook.kopt_register_commands(register=register)
    return commands


def plugin_manager():
    """The plugin manager every command builds its backends and generators from (tests replace it)."""
    from kopt_core.plugins import get_plugin_manager

    return get_plugin_manager()


def store(state_path: str):
    """The run store of ``--state``: a run's state.json or its folder."""
    from pathlib import Path

    from kopt_core.run.layout import STATE_FILE
    from kopt_core.run.store import RunStore

    path = Path(state_path)
    return RunStore(path.parent if path.name == STATE_FILE else path)


# ------------------------------------------------------------------------------------------- option types


class FiniteRange(click.FloatRange):
    """A float in a range that is also finite: click's FloatRange lets nan (and inf with no maximum)
    through."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number in the range {self._describe_range()}.", param, ctx)
        return number


POSITIVE = FiniteRange(min=0, min_open=True)
NON_NEGATIVE = FiniteRange(min=0)


# ----------------------------------------------------------------------------------------- shared options

# A run's limit on each compute-sanitizer tool per branch (state.json sanitizer_timeout_s): init, optimize.
SANITIZER_TIMEOUT = click.option(
    "--sanitizer-timeout",
    "sanitizer_timeout_s",
    type=click.FloatRange(min=0, min_open=True, max=86400),
    default=SANITIZER_TIMEOUT_S,
    show_default=True,
    help="Seconds each compute-sanitizer tool may take on a branch; past it, race_safe is unknown.",
)


DIMS_HELP = 'Dims as JSON, e.g. \'{"M":4096,"N":4096}\'.'


def dims_option(help: str = DIMS_HELP) -> Callable[[F], F]:
    """``--dims``: the dims as one JSON object, beside (or instead of) the free ``--NAME=VALUE`` ones."""
    return click.option("--dims", "dims_json", default=None, help=help)


def numerics_mode_option(help: str) -> Callable[[F], F]:
    """``--numerics-mode``: the run's numerical contract (state.json numerics_mode)."""
    return click.option(
        "--numerics-mode",
        type=click.Choice(NUMERICS_MODES),
        default=default_of(State, "numerics_mode"),
        show_default=True,
        help=help,
    )


def compile_jobs_option(help: str = "Parallel CPU compiles: auto or N.") -> Callable[[F], F]:
    """``--compile-jobs``: parallel CPU compiles, auto or N (state.json compile_jobs)."""
    return click.option(
        "--compile-jobs", default=default_of(State, "compile_jobs"), show_default=True, help=help
    )


def key_values(_ctx, _param, values: tuple[str, ...]) -> dict[str, str]:
    """Repeated ``KEY=VALUE`` options as a dict (a later KEY wins)."""
    options: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r}: write KEY=VALUE (e.g. trials=24)")
        options[key.strip()] = text
    return options


def executor_options(
    help: str = "Where candidates are timed: local, gpus, ray, or a plugin's.",
) -> Callable[[F], F]:
    """``--executor NAME`` and ``--executor-option KEY=VALUE`` (docs/executors.md)."""

    def decorate(function: F) -> F:
        function = click.option(
            "--executor-option",
            "executor_options",
            multiple=True,
            callback=key_values,
            metavar="KEY=VALUE",
            help="An option of the executor (repeatable), e.g. devices=0,1 or address=ray://head:10001.",
        )(function)
        return click.option("--executor", default="local", show_default=True, help=help)(function)

    return decorate
