"""Blocked turns: a slow memory model, a user who keeps typing, and how often a turn has to wait.

The Observer and Reflector are the fake model with a fixed latency (2 s; the quick run quarters every
duration), the user sends a new message one second (of simulated typing) after each answer, and the
assistant replies at once. A turn "waited" when either of its calls reports `blocked` (it waited for a
synchronous observation or reflection). Default settings should never wait in this scenario; a sweep
of `observation.messageTokens` on parallel threads finds the setting at which waiting starts, since
buffering every `0.2 × messageTokens` has to keep up with a model that answers only every 2 s.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from tests.bench.conversations import message_body, with_exchanges
from tests.bench.harness import Bench
from tests.bench.http_driver import TurnPoster, turn_payload
from tests.bench.latency_model_ids import model_for
from tests.bench.results import FigureDef, Target, median

SECTION = "blocking"
#: messageTokens of the sweep; None is the default (30000).
SWEEP: tuple[int | None, ...] = (None, 8000, 4000, 2000, 1000)


@dataclass(frozen=True)
class Scenario:
    latency_s: float
    typing_s: float
    exchanges: int


FULL = Scenario(latency_s=2.0, typing_s=1.0, exchanges=80)
#: Every duration a quarter of the full run's: whether buffering keeps up depends on their ratio.
QUICK = Scenario(latency_s=0.5, typing_s=0.25, exchanges=16)
BLOCKED_AT_DEFAULTS = FigureDef("blocked turns at default settings", "%")
BLOCKING_ONSET = FigureDef("blocking starts at messageTokens ≤", "tokens")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order."""
    return [BLOCKED_AT_DEFAULTS, BLOCKING_ONSET]


@dataclass
class Outcome:
    message_tokens: int | None
    waited: list[bool] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)

    @property
    def share(self) -> float:
        return sum(self.waited) / len(self.waited) if self.waited else float("nan")


async def _thread(
    poster: TurnPoster, scenario: Scenario, message_tokens: int | None, seed: int, run_id: str
) -> Outcome:
    thread_id = f"block-{run_id}-{message_tokens or 'default'}"
    resource = f"block-user-{run_id}-{seed}"
    overrides: dict[str, Any] = {"model": model_for(scenario.latency_s)}
    if message_tokens is not None:
        overrides["observation"] = {"messageTokens": message_tokens}
    await poster.set_config(thread_id, overrides, resource)
    conversation = with_exchanges(seed, scenario.exchanges)
    outcome = Outcome(message_tokens)
    for user, reply in conversation.exchanges()[: scenario.exchanges]:
        first = await poster.post(thread_id, turn_payload([message_body(user)], resource))
        second = await poster.post(thread_id, turn_payload([message_body(reply)], resource))
        outcome.waited.append(b'"blocked":true' in first.body or b'"blocked":true' in second.body)
        outcome.turn_ms.append(first.elapsed_ms + second.elapsed_ms)
        await asyncio.sleep(scenario.typing_s)
    return outcome


async def _sweep(bench: Bench, scenario: Scenario) -> list[Outcome]:
    run_id = bench.run_id
    async with TurnPoster(bench.api.base_url, bench.api_key) as poster:
        return list(
            await asyncio.gather(
                *(
                    _thread(poster, scenario, tokens, 500 + index, run_id)
                    for index, tokens in enumerate(SWEEP)
                )
            )
        )


def run(bench: Bench) -> None:
    scenario = QUICK if bench.quick else FULL
    bench.wait_idle()
    bench.say(
        f"blocking: model latency {scenario.latency_s:g} s, {scenario.typing_s:g} s of typing per turn, "
        f"{scenario.exchanges} turns on {len(SWEEP)} threads (messageTokens "
        f"{', '.join(str(t or 'default') for t in SWEEP)})"
    )
    started = time.monotonic()
    outcomes = asyncio.run(_sweep(bench, scenario))
    elapsed = time.monotonic() - started
    bench.results.series["blocking"] = [
        {
            "message_tokens": o.message_tokens or 30000,
            "share": o.share,
            "turn_ms": o.turn_ms,
            "waited": o.waited,
        }
        for o in outcomes
    ]
    bench.section_meta(SECTION, scenario=vars(scenario), seconds=elapsed)
    default = outcomes[0]
    bench.results.add(
        SECTION,
        BLOCKED_AT_DEFAULTS,
        default.share * 100,
        target=Target.at_most(0, " %"),
        why=lambda: f"{sum(default.waited)} of {len(default.waited)} turns waited on a model call",
        note=(
            f"latency {scenario.latency_s:g} s, a turn every {scenario.typing_s:g} s of typing, "
            f"{len(default.waited)} turns; median turn {median(default.turn_ms):.0f} ms"
            + ("; quick run: too few turns to reach the default threshold" if bench.quick else "")
        ),
    )
    blocking = [o for o in outcomes[1:] if o.share > 0]
    onset = max((o.message_tokens or 0 for o in blocking), default=0)
    shares = ", ".join(f"{o.message_tokens or 30000}: {o.share * 100:.0f} %" for o in outcomes)
    bench.results.add(
        SECTION,
        BLOCKING_ONSET,
        float(onset) if onset else float("nan"),
        note=f"blocked share by messageTokens: {shares}"
        + ("" if onset else f"; no blocking down to {min(t for t in SWEEP if t)}"),
    )
