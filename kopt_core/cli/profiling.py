"""``kopt profile``: Nsight Compute's report of one kernel read against the roofline, standalone or into a
run's iteration."""

from __future__ import annotations

import click

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.records import ProfileOptions
from kopt_core.records.profile import BUNDLES


@app.cli.command("profile", context_settings=app.FREE_ARGUMENTS)
@click.option(
    "--ref",
    "reference",
    type=click.Path(dir_okay=False),
    help="Reference file (its workload_model makes the roofline real).",
)
@click.option(
    "--import",
    "import_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Analyse an existing .ncu-rep (needs ncu) or raw-page CSV (needs nothing) instead of profiling.",
)
@click.option(
    "--sass",
    "sass_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="With --import: the kernel's SASS (cuobjdump -sass); default: NAME.sass beside NAME.raw.csv.",
)
@app.dims_option("Dims as JSON.")
@click.option("--backend", default=None, help="Backend name (default: detected from the file).")
@click.option("--arch", default=None, help="Target architecture (default: the GPU's).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    callback=outputs.out_folder,
    help=(
        "Folder for the report, ncu_top.json, roofline.json and the plot (default: ./kopt_profile_<kernel>)."
    ),
)
@click.option(
    "--ncu-num",
    type=click.IntRange(1, 50),
    default=app.default_of(ProfileOptions, "ncu_num"),
    show_default=True,
    help="Top metrics per axis.",
)
@click.option(
    "--bundle",
    type=click.Choice(["auto", *BUNDLES]),
    default="auto",
    show_default=True,
    help="ncu metric bundle: auto = full below 10 ms of kernel time, light above.",
)
@click.option(
    "--ncu-timeout-s",
    type=app.POSITIVE,
    default=app.default_of(ProfileOptions, "ncu_timeout_s"),
    show_default=True,
    help="Limit for one ncu run.",
)
@click.option(
    "--full-timeout-s",
    type=app.POSITIVE,
    default=None,
    help="Limit for a full-set run (default: --ncu-timeout-s); past it kopt retries with the light set.",
)
@click.option(
    "--ceilings",
    type=click.Path(dir_okay=False),
    default=None,
    help="Device ceilings JSON (python -m kopt_core.roofline.ceilings); default: built-in H200 figures.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the envelope (result: profile.json with the roofline and the output folder) on stdout.",
)
@click.option(
    "--state",
    "state_path",
    type=click.Path(),
    default=None,
    help="Run form: the run's state.json; with --iter and --which, profile into iterv{i}/.",
)
@click.option("--iter", "iteration", type=click.IntRange(1, None), default=None, help="Run form: iteration.")
@click.option(
    "--which",
    type=click.Choice(["best_input", "kernel"]),
    default=None,
    help="Run form: the iteration's input (the current best) or its champion.",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[KERNEL] [--NAME=VALUE]...")
def profile_cmd(
    args,
    reference,
    import_path,
    sass_path,
    dims_json,
    backend,
    arch,
    out_dir,
    ncu_num,
    bundle,
    ncu_timeout_s,
    full_timeout_s,
    ceilings,
    as_json,
    state_path,
    iteration,
    which,
) -> int:
    """Profile KERNEL with Nsight Compute and write ncu_top.json, roofline.json and a roofline plot.

    Or, with --import, do the same from an existing report or its CSV export.
    """
    from kopt_core.dims import parse_dims
    from kopt_core.errors import ConfigError
    from kopt_core.steps.profile import load_ceilings, profile_document, profile_standalone

    if state_path or iteration or which:
        if not (state_path and iteration and which):
            raise ConfigError("the run form needs all of --state, --iter and --which")
        from kopt_core.run.iteration import profile_in_run

        store = app.store(state_path)
        written = envelope.Written(store.run_dir)
        folder = profile_in_run(app.plugin_manager(), store, iteration, which)
        if as_json:
            return envelope.emit("profile", 0, envelope.run_result(store.run_dir, written, path=str(folder)))
        click.echo(str(folder))
        return 0
    # KERNEL is optional (--import needs none), so it is read from the free arguments: the first one that
    # is not an option; the rest are dims.
    kernel, extra = (args[0], args[1:]) if args and not args[0].startswith("--") else (None, args)
    dims = parse_dims(dims_json, extra)
    options = ProfileOptions(
        ncu_num=ncu_num,
        bundle=None if bundle == "auto" else bundle,
        ncu_timeout_s=ncu_timeout_s,
        full_timeout_s=full_timeout_s,
        ceilings=load_ceilings(ceilings),
    )
    outcome = profile_standalone(
        kernel,
        reference,
        dims,
        import_path=import_path,
        sass=sass_path,
        out_dir=out_dir,
        backend=backend,
        arch=arch,
        options=options,
        on_warning=render.warning,
    )
    if as_json:
        return envelope.emit("profile", 0, profile_document(outcome))
    render.profile_report(outcome)
    return 0
