"""``kopt campaign MANIFEST --out DIR``: many ``kopt optimize`` runs, one per slot at a time
(kopt_core.run.campaign), resumable: the same command again goes on where a killed campaign stopped."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kopt_core.cli import app, envelope, outputs, render
from kopt_core.run.summary import fmt_ms


@app.cli.command("campaign")
@click.argument("manifest", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    callback=outputs.out_folder,
    help="The campaign's folder: campaign.json, and each run's folder (its log and its run folder).",
)
@app.executor_options(
    "Where the runs go: local (one at a time, the environment untouched) or gpus (one at a time on each GPU "
    "of this host, pinned with CUDA_VISIBLE_DEVICES)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the envelope (result: every run) on stdout.")
def campaign_cmd(manifest, out_dir, executor, executor_options, as_json) -> int:
    """Run every run MANIFEST lists as its own `kopt optimize`, at most one per slot at a time, each in
    DIR/<name>/ (its log optimize.log, its run folder run_*/). Running it again skips the runs finished
    and continues those a killed or interrupted campaign left running (--resume of their run folder).

    Exit 0: every run ended 0. Else the highest of the runs' meaningful codes: 4 (a bad input) over 3
    (hardware, tool or ncu) over 2 (no valid kernel); 1 when the runs failed otherwise. A bad manifest,
    executor or option is 4 before any run starts; Ctrl-C stops the runs (130) and leaves them to resume."""
    from kopt_core.run.campaign import run_campaign

    outcome = run_campaign(
        app.plugin_manager(),
        manifest,
        out_dir,
        executor=executor,
        options=executor_options,
        on_event=lambda message: click.echo(f"kopt: campaign: {message}", err=True),
    )
    if as_json:
        error = None
        if outcome.exit_code:
            failed = [f"{row['name']} (exit {row['exit_code']})" for row in outcome.runs if row["exit_code"]]
            error = envelope.error_data(
                envelope.TYPE_FOR_EXIT.get(outcome.exit_code, "KoptError"),
                f"{len(failed)} of {len(outcome.runs)} runs failed: {', '.join(failed)}",
                "each run's log is DIR/<name>/optimize.log; campaign.json has the last lines of its stderr",
            )
        return envelope.emit("campaign", outcome.exit_code, outcome.to_data(), error)
    campaign_report(outcome)
    return outcome.exit_code


def campaign_report(outcome) -> None:
    """Every run of the campaign, a row each; then, for each run that failed, its error and its log."""
    table = Table(title=escape(f"kopt campaign: {outcome.out}"))
    for column in ("run", "status", "exit", "slot", "run status", "best", "run folder"):
        table.add_column(column, overflow="fold")
    colours = {"done": "green", "failed": "red"}
    for row in outcome.runs:
        best = fmt_ms(row["best_ms"])
        if row["speedup"]:
            best += f" ({row['speedup']:.2f}x)"
        table.add_row(
            escape(row["name"]),
            f"[{colours.get(row['status'], 'cyan')}]{escape(row['status'])}[/]",
            "-" if row["exit_code"] is None else str(row["exit_code"]),
            escape(row["slot"] or "-"),
            escape(row["run_status"] or "-"),
            best,
            escape(row["run_dir"] or "-"),
        )
    render.out.print(table)
    lines = []
    if outcome.skipped:
        lines.append(f"finished before this campaign, not run again: {', '.join(outcome.skipped)}")
    for row in outcome.runs:
        if row["status"] == "failed":
            reason = row["error"] or (row["stderr_tail"][-1] if row["stderr_tail"] else "no message")
            lines.append(f"{row['name']}: exit {row['exit_code']}: {reason.splitlines()[0]}")
            lines.append(f"  log: {row['log']}")
    lines.append(f"campaign.json: {outcome.to_data()['campaign_file']}")
    render.out.print(Text("\n".join(lines)))  # foreign text (paths, messages): never read as markup
