"""`om search`, `om threads`, `om forget`: a tenant's memory from the command line, through the HTTP API.

These are clients, not operator tools: they call the server at `OM_BASE_URL` (default
http://127.0.0.1:8088) with the key in `OM_API_KEY` through `om_client`, so they see exactly what that key
may see and nothing else, and need no database access. Each prints lines for a person, or with `--json`
one JSON document on stdout for a program (errors go to stderr either way, with exit status 1).
`om_app.cli` registers them (`register`); `om export` / `om import` live elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

if TYPE_CHECKING:
    from om_client import OMClient

__all__ = ["register"]

#: The options every data command takes; read from the environment so a key never needs to be typed
#: where the process list shows it.
BaseUrl = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        envvar="OM_BASE_URL",
        help="The om server [default: http://127.0.0.1:8088]",
        show_default=False,
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="OM_API_KEY",
        help="The tenant's API key (prefer the OM_API_KEY variable: an option shows in the process list)",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON document on stdout, for programs")]

#: The most results or threads one command prints: what a terminal or a script reads, not a dump.
MAX_LIMIT = 200


@contextmanager
def _client(base_url: str | None, api_key: str | None) -> Iterator[OMClient]:
    """A client of the server; an answer the server refused, or no answer, ends the command with
    `error: ...` on stderr and exit status 1."""
    import httpx

    from om_client import OMAPIError, OMClient, OMRetriesExhausted, RetryPolicy
    from om_client.bodies import base_url_from_env

    where = base_url_from_env(base_url)
    try:  # a person waits at the terminal: a few quick retries, then say what is wrong
        with OMClient(where, api_key, timeout=60, retry=RetryPolicy(attempts=3, budget_s=5.0)) as client:
            yield client
    except (httpx.TransportError, OMRetriesExhausted) as exc:
        typer.echo(f"error: no answer from {where}: {exc} (is `om serve` or `om up` running?)", err=True)
        raise typer.Exit(1) from None
    except OMAPIError as exc:
        typer.echo(f"error: {exc.message} ({exc.status} {exc.code})", err=True)
        raise typer.Exit(1) from None


def _dump(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def search(
    query: Annotated[str, typer.Argument(help="Words, codes or a question")],
    resource: Annotated[str | None, typer.Option(help="Search this resource's threads")] = None,
    thread: Annotated[str | None, typer.Option(help="Search only this thread")] = None,
    limit: Annotated[int, typer.Option(min=1, max=50, help="Most results")] = 10,
    kind: Annotated[
        Literal["group", "message"] | None,
        typer.Option(help="Only observation groups or only raw messages [default: both]", show_default=False),
    ] = None,
    as_json: AsJson = False,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Search a resource's (or one thread's) raw messages and observation groups; needs the config's
    `retrieval` on."""
    if (resource is None) == (thread is None):
        typer.echo("error: give exactly one of --resource or --thread", err=True)
        raise typer.Exit(2)
    kinds = [kind] if kind is not None else None
    with _client(base_url, api_key) as om:
        if resource is not None:
            found = om.search(resource, query, limit=limit, kinds=kinds)
        else:
            assert thread is not None
            found = om.search_thread(thread, query, limit=limit, kinds=kinds)
    if as_json:
        _dump(found.model_dump(mode="json"))
        return
    if not found.results:
        typer.echo("no results")
    for hit in found.results:
        typer.echo(
            f"{hit.score:.4f}  {hit.kind:<7}  {hit.thread_id}  {hit.at:%Y-%m-%d %H:%M}  {_one_line(hit.text)}"
        )


def threads(
    resource: Annotated[str | None, typer.Option(help="Only this resource's threads (oldest first)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIMIT, help="Most threads to print")] = 50,
    cursor: Annotated[
        str | None, typer.Option(help="Continue after a previous page (its next_cursor)", show_default=False)
    ] = None,
    as_json: AsJson = False,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
) -> None:
    """List the key's threads by id (or one resource's), one page: `--json` gives `items` and the
    `next_cursor` to pass as `--cursor` for the next page."""
    with _client(base_url, api_key) as om:
        page = om.list_threads(resource_id=resource, limit=limit, cursor=cursor)
    if as_json:
        _dump(page.model_dump(mode="json"))
        return
    if not page.items:
        typer.echo("no threads")
    for info in page.items:
        title = _one_line(info.title, 60) if info.title else "-"
        active = f"{info.last_activity_at:%Y-%m-%d %H:%M}" if info.last_activity_at else "-"
        typer.echo(f"{info.thread_id}\t{info.resource_id}\t{info.messages} messages\t{active}\t{title}")
    if page.next_cursor is not None:
        typer.echo(f"more: --cursor {page.next_cursor}", err=True)


def forget(
    thread: Annotated[
        str | None, typer.Option(help="Forget this thread (or a line of its log: --line)")
    ] = None,
    resource: Annotated[
        str | None, typer.Option(help="Forget this resource: all its threads, its shared log, its config")
    ] = None,
    line: Annotated[
        int | None,
        typer.Option(min=0, help="With --thread: forget only this line (0-based) of its active observations"),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
    as_json: AsJson = False,
    base_url: BaseUrl = None,
    api_key: ApiKey = None,
) -> None:
    """Erase a thread, a resource, or one observation line, everywhere om keeps it. Cannot be undone."""
    if (resource is None) == (thread is None) or (line is not None and thread is None):
        typer.echo("error: give exactly one of --thread or --resource (--line only with --thread)", err=True)
        raise typer.Exit(2)
    what = f"resource {resource!r}" if resource is not None else f"thread {thread!r}"
    if line is not None:
        what = f"line {line} of {what}'s observations"
    if not yes and not typer.confirm(f"forget {what}? This cannot be undone", err=True):
        typer.echo("nothing forgotten", err=True)
        raise typer.Exit(1)
    result: dict[str, Any]
    with _client(base_url, api_key) as om:
        if resource is not None:
            om.delete_resource(resource)
            result = {"forgot": "resource", "resource_id": resource}
        elif line is None:
            assert thread is not None
            om.delete_thread(thread)
            result = {"forgot": "thread", "thread_id": thread}
        else:
            assert thread is not None
            result = _forget_line(om, thread, line)
    if as_json:
        _dump(result)
    else:
        typer.echo(f"forgot {what}")


def _forget_line(om: OMClient, thread: str, line: int) -> dict[str, Any]:
    """Delete the line as read now: the server refuses (409) if the log changed in between."""
    active = om.observations(thread, history_limit=0).active
    lines = active.observations.split("\n") if active is not None else []
    if line >= len(lines):
        typer.echo(
            f"error: thread {thread!r} has {len(lines)} observation lines; --line {line} is past them",
            err=True,
        )
        raise typer.Exit(2)
    edited = om.delete_observation(thread, line, expected=lines[line])
    return {
        "forgot": "observation_line",
        "thread_id": thread,
        "line": line,
        "text": lines[line],
        "generation_count": edited.generation_count,
    }


COMMANDS: dict[str, Callable[..., None]] = {"search": search, "threads": threads, "forget": forget}


def register(app: typer.Typer) -> None:
    """Add the data commands to the `om` command line."""
    for name, command in COMMANDS.items():
        app.command(name)(command)
