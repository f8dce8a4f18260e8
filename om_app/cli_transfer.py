"""`om export` and `om import`: a thread's, a resource's or a tenant's memory as JSON Lines, and back.

Both work on the database at OM_DATABASE_URL directly (an operator's commands, like `om keys`): `--tenant`
names the tenant whose ids are read or written (leave it out for a server without keys, `OM_AUTH=none`).
`om import --from-mastra` reads the original's storage instead of a file (`om_core.transfer.mastra`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from om_core import MemoryEngine, Settings

__all__ = ["register"]

TENANT_HELP = "The tenant whose memory this is (the tenant of its API keys); leave out without auth"


def register(app: typer.Typer) -> None:
    """Add the two commands to the `om` app."""
    app.command("export")(export_command)
    app.command("import")(import_command)


def _engine() -> tuple[MemoryEngine, Settings]:
    from om_app.cli import _preflight, _settings
    from om_core import Settings, build_engine

    settings = _settings(Settings)
    _preflight("status", settings)
    return build_engine(settings), settings


def export_command(
    thread: Annotated[str | None, typer.Argument(help="The thread to export")] = None,
    resource: Annotated[str | None, typer.Option("--resource", help="Export this resource instead")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Export every resource of the tenant")] = False,
    tenant: Annotated[str | None, typer.Option("--tenant", help=TENANT_HELP)] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="Write to this file instead of stdout")] = "-",
) -> None:
    """Write a thread's (or a resource's, or a whole tenant's) memory to stdout as JSON Lines
    (docs/guide/export-import.md): `om export THREAD > thread.jsonl`."""
    from om_core.transfer import export
    from om_core.transfer.records import dump_line

    if sum((thread is not None, resource is not None, all_)) != 1:
        typer.echo("error: name exactly one of THREAD, --resource R or --all", err=True)
        raise typer.Exit(2)
    engine, _ = _engine()
    try:
        if thread is not None:
            lines = export.export_thread(engine.db, tenant, thread)
        elif resource is not None:
            lines = export.export_resource(engine.db, tenant, resource)
        else:
            lines = export.export_tenant(engine.db, tenant)
    except export.ExportNotFound as exc:
        typer.echo(f"error: {exc} for tenant {tenant!r}: check the id and --tenant", err=True)
        raise typer.Exit(1) from None
    with contextlib.ExitStack() as stack:
        out = sys.stdout if output == "-" else stack.enter_context(Path(output).open("w", encoding="utf-8"))
        for line in lines:
            out.write(dump_line(line))
        out.flush()


def _file_lines(path: str) -> Iterator[bytes]:
    if path == "-":
        yield from sys.stdin.buffer
        return
    with Path(path).open("rb") as handle:
        yield from handle


def import_command(
    file: Annotated[str | None, typer.Argument(help="The JSON Lines file to import, or - for stdin")] = None,
    from_mastra: Annotated[
        str | None,
        typer.Option(
            "--from-mastra",
            help="Import from the original's storage instead: a LibSQL/SQLite file or a postgres:// URL",
        ),
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help=TENANT_HELP)] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Progress and result as JSON, one object a line")
    ] = False,
) -> None:
    """Import a file of JSON Lines (an `om export`), or the original's database, into the tenant's memory.
    Idempotent: messages already stored (by id) and logs already present are left alone."""
    from om_core.transfer import importer, mastra, service
    from om_core.transfer.records import dump_line

    if (file is None) == (from_mastra is None):
        typer.echo("error: give a FILE (or - for stdin), or --from-mastra SOURCE", err=True)
        raise typer.Exit(2)
    engine, settings = _engine()
    lines: Iterator[bytes] | Iterator[str]
    if from_mastra is not None:
        try:
            source = mastra.open_source(from_mastra)
            lines = (dump_line(line) for line in mastra.read_mastra(source))
        except mastra.MastraSourceError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    else:
        if file != "-" and not Path(str(file)).is_file():
            typer.echo(f"error: no file {file!r}", err=True)
            raise typer.Exit(1)
        lines = _file_lines(str(file))

    def progress(report: importer.ImportReport) -> None:
        if as_json:
            typer.echo(json.dumps(report.as_dict()))

    try:
        report = service.import_into(
            engine, lines, tenant_id=tenant, limits=service.limits_of(settings), on_progress=progress
        )
    except (importer.ImportRefused, mastra.MastraSourceError) as exc:
        if as_json:
            typer.echo(json.dumps({"error": str(exc), "reason": getattr(exc, "reason", "invalid")}))
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
    else:
        typer.echo(
            f"imported {report.threads} new threads ({report.threads_existing} existing), {report.messages} "
            f"messages ({report.messages_skipped} already stored), {report.records} log generations, "
            f"{report.groups} groups, {report.working_memory} working memories"
        )
