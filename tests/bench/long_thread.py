"""One long thread over HTTP with the offline local model: context size, flatness, compression, retention.

The thread plays a generated conversation (tool calls with large results included) at default settings:

1. **1M tokens (quick: 200k), exchange by exchange.** Each call posts the previous assistant reply with
   the next user message, as a backend that stores the reply lazily would, so every answer is exactly the
   context the actor receives for that user message. Its size is counted exactly (o200k, om's units) and
   compared with `1.2 × messageTokens + 1.2 × observationTokens`.
2. **Flatness.** Around turn 100 the exchanges are played as two timed calls (user message, then reply),
   the turn path's definition. The full run then loads the thread further, 20 exchanges per request
   (untimed), to turn 4,970, and times the turns around 5,000 the same way. The quick run compares turn
   ~60 with turn ~200 of the 200k thread instead: a smaller ratio of history lengths, said in the table.
3. **Compression and retention** are read from the final context: covered tokens ÷ observation-log
   tokens, and how many planted facts (latest value after corrections) it still states.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from om_core.messages import Message
from om_core.tokens import CONVERSATION_OVERHEAD, TokenCounter
from tests.bench.conversations import BenchConversation, generate, message_body, write_key_file
from tests.bench.harness import Bench
from tests.bench.http_driver import Call, TurnPoster, turn_payload
from tests.bench.results import FigureDef, Target, median

SECTION = "long_thread"
FLAT_SECTION = "flatness"
MEMORY_SECTION = "local_model"
SEED = 2027


@dataclass(frozen=True)
class Plan:
    tokens: int
    near: tuple[int, int]  # exchanges [start, end) timed two calls each, 1-based turn numbers
    #: The far window; None: the last `near` window's length of the token-bounded part (quick run).
    far: tuple[int, int] | None
    bulk_batch: int = 20

    def far_window(self, lead_turns: int) -> tuple[int, int]:
        if self.far is not None:
            return self.far
        width = self.near[1] - self.near[0]
        return (lead_turns - width + 1, lead_turns + 1)

    @property
    def bulk(self) -> bool:
        """Whether the far window lies beyond the token-bounded part (reached by batched loading)."""
        return self.far is not None


FULL = Plan(tokens=1_000_000, near=(70, 130), far=(4_970, 5_030))
QUICK = Plan(tokens=200_000, near=(40, 80), far=None)
FLATNESS_TARGET = 1.2
COMPRESSION_TARGET = 5.0
RETENTION_TARGET = 0.9
FLATNESS = FigureDef("flatness, median turn cost late ÷ early", "×")
COMPRESSION = FigureDef("local model: compression (covered ÷ log tokens)", "×")
RETENTION = FigureDef("local model: planted facts in final context", "%")


def largest_context(plan: Plan) -> FigureDef:
    size = f"{plan.tokens // 1000}k" if plan.tokens < 1_000_000 else f"{plan.tokens // 1_000_000}M"
    return FigureDef(f"largest actor context over {size} tokens", "tokens")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order (flatness and the local model's are grouped apart)."""
    return [largest_context(QUICK if quick else FULL), FLATNESS, COMPRESSION, RETENTION]


@dataclass
class Counted:
    """Exact token weights of the conversation's messages, per part, computed once up front."""

    counter: TokenCounter
    parts: dict[str, list[tuple[float, float, int]]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)
    system_cache: dict[str, int] = field(default_factory=dict)

    def add(self, message: Message) -> None:
        copy = message.model_copy(deep=True)  # counting caches estimates on parts; never send those
        counts = [self.counter.count_part(p) for p in copy.parts]
        self.parts[message.id] = [(c.tokens, c.overhead_delta, c.extra_messages) for c in counts]
        self.roles[message.id] = message.role

    def message_tokens(self, message_id: str, part_count: int) -> int:
        """A message's weight from its last `part_count` parts (unobserved parts are always a tail)."""
        from om_core.tokens import PartCount

        tail = self.parts[message_id][-part_count:] if part_count else []
        return self.counter.message_total(self.roles[message_id], [PartCount(*t) for t in tail])

    def text_tokens(self, text: str) -> int:
        key = hashlib.sha256(text.encode()).hexdigest()
        cached = self.system_cache.get(key)
        if cached is None:
            cached = self.system_cache[key] = self.counter.count_string(text)
        return cached


@dataclass
class ContextPoint:
    turn: int
    context_tokens: int
    message_tokens: int
    observation_tokens: int
    status_messages: int
    status_observations: int
    message_threshold: int
    observation_threshold: int
    blocked: bool
    degraded: bool


@dataclass
class Played:
    points: list[ContextPoint] = field(default_factory=list)
    near_ms: list[float] = field(default_factory=list)
    far_ms: list[float] = field(default_factory=list)
    near_windows: list[int] = field(default_factory=list)
    far_windows: list[int] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    posted_tokens: int = 0
    bulk_seconds: float = 0.0
    play_seconds: float = 0.0
    far_turns: tuple[int, int] = (0, 0)


def _context_point(turn: int, call: Call, counted: Counted) -> tuple[ContextPoint, dict[str, Any]]:
    data = call.json()
    context = data["context"]
    system_text = "\n".join(context["system_messages"])
    observation_tokens = counted.text_tokens(system_text) if system_text else 0
    messages = context["messages"]
    message_tokens = sum(counted.message_tokens(m["id"], len(m["parts"])) for m in messages)
    if messages:
        message_tokens += CONVERSATION_OVERHEAD
    reminder = context.get("continuation_reminder") or ""
    extra = counted.text_tokens(reminder) if reminder else 0
    windows = data["status"]["windows"]["active"]
    point = ContextPoint(
        turn=turn,
        context_tokens=observation_tokens + message_tokens + extra,
        message_tokens=message_tokens,
        observation_tokens=observation_tokens + extra,
        status_messages=int(windows["messages"]["tokens"]),
        status_observations=int(windows["observations"]["tokens"]),
        message_threshold=int(windows["messages"]["threshold"]),
        observation_threshold=int(windows["observations"]["threshold"]),
        blocked=bool(data["blocked"]),
        degraded=bool(data["degraded"]),
    )
    return point, data


class Player:
    """Plays exchanges on one thread, keeping the assistant reply that has not been posted yet."""

    def __init__(self, poster: TurnPoster, thread_id: str, resource_id: str, counted: Counted) -> None:
        self.poster = poster
        self.thread_id = thread_id
        self.resource_id = resource_id
        self.counted = counted
        self.pending: Message | None = None
        self.posted_messages: list[Message] = []
        self.last: dict[str, Any] = {}

    async def _post(self, messages: list[Message]) -> Call:
        call = await self.poster.post(
            self.thread_id, turn_payload([message_body(m) for m in messages], self.resource_id, "full")
        )
        self.posted_messages.extend(messages)
        return call

    async def lazy(self, turn: int, user: Message, reply: Message, played: Played) -> None:
        """One call: the previous reply and this user message; the answer is the actor's context."""
        batch = [self.pending, user] if self.pending is not None else [user]
        call = await self._post(batch)
        point, self.last = _context_point(turn, call, self.counted)
        played.points.append(point)
        self.pending = reply

    async def timed(self, turn: int, user: Message, reply: Message, played: Played, out: list[float]) -> int:
        """Two timed calls, the turn path's definition; returns the unobserved window it saw."""
        if self.pending is not None:
            await self._post([self.pending])
            self.pending = None
        first = await self._post([user])
        second = await self._post([reply])
        out.append(first.elapsed_ms + second.elapsed_ms)
        point, _ = _context_point(turn, first, self.counted)
        played.points.append(point)
        self.last = second.json()
        return point.status_messages

    async def bulk(self, pairs: list[tuple[Message, Message]]) -> None:
        batch: list[Message] = [self.pending] if self.pending is not None else []
        self.pending = None
        for user, reply in pairs:
            batch.extend([user, reply])
        call = await self._post(batch)
        self.last = call.json()

    async def finish(self) -> None:
        if self.pending is not None:
            call = await self._post([self.pending])
            self.pending = None
            self.last = call.json()


def _conversation(bench: Bench, plan: Plan) -> tuple[BenchConversation, int]:
    """The whole conversation, and how many of its exchanges make up the first `plan.tokens` tokens."""
    turns_needed = plan.far[1] if plan.far is not None else 0
    # ~880 counted tokens per exchange with tool results; ask for enough to reach every timed window.
    tokens = max(plan.tokens, int(turns_needed * 950))
    conversation = generate(seed=SEED, target_tokens=tokens)
    counter = TokenCounter()
    produced = 0
    first_part = 0
    for index, (user, reply) in enumerate(conversation.exchanges(), start=1):
        for message in (user, reply):
            for part in message.parts:
                if part.text:
                    produced += counter.count_string(part.text)
                if part.result is not None:
                    result = part.result if isinstance(part.result, str) else json.dumps(part.result)
                    produced += counter.count_string(result)
        first_part = index
        if produced >= plan.tokens:
            break
    return conversation, first_part


async def _play(bench: Bench, plan: Plan, conversation: BenchConversation, lead_turns: int) -> Played:
    counted = Counted(TokenCounter())
    for message in conversation.messages:
        counted.add(message)
    played = Played()
    thread_id = f"long-{bench.run_id}"
    pairs = conversation.exchanges()
    far = plan.far_window(lead_turns)
    async with TurnPoster(bench.api.base_url, bench.api_key) as poster:
        player = Player(poster, thread_id, f"long-user-{bench.run_id}", counted)
        started = time.perf_counter()
        for turn, (user, reply) in enumerate(pairs[:lead_turns], start=1):
            if plan.near[0] <= turn < plan.near[1]:
                played.near_windows.append(await player.timed(turn, user, reply, played, played.near_ms))
            elif not plan.bulk and far[0] <= turn < far[1]:
                played.far_windows.append(await player.timed(turn, user, reply, played, played.far_ms))
            else:
                await player.lazy(turn, user, reply, played)
            if turn % 200 == 0:
                bench.say(
                    f"long thread: turn {turn}/{lead_turns}, "
                    f"context {played.points[-1].context_tokens:,} tokens"
                )
        played.play_seconds = time.perf_counter() - started
        await player.finish()
        played.final = _final_state(player.last, conversation, counted, player.posted_messages)
        played.final["observer_lost"], played.final["later_lost"] = _where_lost(
            bench, thread_id, conversation, played.final["missing"]
        )
        (bench.workdir / "final-context.txt").write_text(_visible_text(player.last))
        if plan.bulk:
            bench.say(f"flatness: loading the thread from turn {lead_turns + 1} to {far[0] - 1} (untimed)")
            started = time.perf_counter()
            # pairs[i] is turn i + 1: load turns lead_turns + 1 .. far[0] - 1.
            for start in range(lead_turns, far[0] - 1, plan.bulk_batch):
                end = min(start + plan.bulk_batch, far[0] - 1)
                await player.bulk(pairs[start:end])
            played.bulk_seconds = time.perf_counter() - started
            await asyncio.to_thread(bench.wait_idle)
            bench.say(f"flatness: timing turns {far[0]}..{far[1] - 1}")
            for turn in range(far[0], far[1]):
                user, reply = pairs[turn - 1]
                played.far_windows.append(await player.timed(turn, user, reply, played, played.far_ms))
    played.posted_tokens = sum(counted.message_tokens(m.id, len(m.parts)) for m in player.posted_messages)
    played.far_turns = far
    return played


def _visible_text(response: dict[str, Any]) -> str:
    context = response["context"]
    texts = list(context["system_messages"])
    for message in context["messages"]:
        for part in message["parts"]:
            if part.get("text"):
                texts.append(part["text"])
    return "\n".join(texts)


def _final_state(
    response: dict[str, Any], conversation: BenchConversation, counted: Counted, posted: list[Message]
) -> dict[str, Any]:
    visible = _visible_text(response)
    kept = sorted(key for key, needle in conversation.facts.items() if needle in visible)
    # An original value the correction replaced (the budget's 2400 euros), not one it repeats (Porto).
    corrections = {e["key"]: e["needle"] for e in conversation.fact_log if e["correction"]}
    superseded = [
        entry["needle"]
        for entry in conversation.fact_log
        if not entry["correction"]
        and entry["key"] in corrections
        and entry["needle"] not in _sentence_of(entry["key"], corrections[entry["key"]])
    ]
    windows = response["status"]["windows"]["active"]
    unobserved = int(windows["messages"]["tokens"])
    log_tokens = int(windows["observations"]["tokens"])
    history_tokens = CONVERSATION_OVERHEAD + sum(counted.message_tokens(m.id, len(m.parts)) for m in posted)
    covered = max(0, history_tokens - unobserved)
    return {
        "facts": conversation.facts,
        "kept": kept,
        "missing": sorted(set(conversation.facts) - set(kept)),
        "superseded_values_still_shown": [n for n in superseded if n in visible],
        "history_tokens": history_tokens,
        "unobserved_tokens": unobserved,
        "observation_log_tokens": log_tokens,
        "covered_tokens": covered,
        "compression": covered / log_tokens if log_tokens else float("nan"),
        "generation_count": response["status"]["generationCount"],
    }


def _sentence_of(key: str, needle: str) -> str:
    from om_app.sample_conversation import CORRECTIONS

    return next((sentence for k, sentence, n in CORRECTIONS if k == key and n == needle), "")


def _where_lost(
    bench: Bench, thread_id: str, conversation: BenchConversation, missing: list[str]
) -> tuple[list[str], list[str]]:
    """Split the missing facts into those no Observer output ever stated and those lost afterwards
    (a reflection condensed them away)."""
    from om_core.store.outbox import list_events
    from om_core.tenancy.scoped_ids import scoped_id

    events = list_events(
        bench.services.db,
        thread_id=scoped_id(bench.tenant, thread_id),
        limit=10_000_000,
        types=("data-om-buffering-end", "data-om-observation-end"),
    )
    observed = "\n".join(
        str(e.payload.get("observations", ""))
        for e in events
        if e.payload.get("operationType") == "observation"
    )
    never = [key for key in missing if conversation.facts[key] not in observed]
    return never, [key for key in missing if key not in never]


def run(bench: Bench) -> None:
    plan = QUICK if bench.quick else FULL
    conversation, lead_turns = _conversation(bench, plan)
    write_key_file(conversation, bench.workdir / "conversation-key.json")
    bench.say(
        f"long thread: {lead_turns} exchanges (~{plan.tokens:,} tokens, {conversation.tool_calls} tool calls "
        f"in the whole conversation), local model, default thresholds"
    )
    played = asyncio.run(_play(bench, plan, conversation, lead_turns))
    _report(bench, plan, played, lead_turns)


def _report(bench: Bench, plan: Plan, played: Played, lead_turns: int) -> None:
    points = [p for p in played.points if p.turn <= lead_turns]
    peak = max(points, key=lambda p: p.context_tokens)
    bound = 1.2 * peak.message_threshold + 1.2 * peak.observation_threshold
    final = played.final
    bench.results.series["context"] = [vars(p) for p in points]
    bench.results.series["flatness"] = {
        "near_turns": list(plan.near),
        "far_turns": list(played.far_turns),
        "near_ms": played.near_ms,
        "far_ms": played.far_ms,
        "near_windows": played.near_windows,
        "far_windows": played.far_windows,
    }
    bench.section_meta(
        SECTION,
        exchanges=lead_turns,
        play_seconds=played.play_seconds,
        bulk_seconds=played.bulk_seconds,
        blocked_calls=sum(p.blocked for p in points),
        degraded_calls=sum(p.degraded for p in points),
        final=final,
    )
    bench.results.add(
        SECTION,
        largest_context(plan),
        peak.context_tokens,
        target=Target.at_most(bound, " tokens (1.2×msg + 1.2×obs)"),
        why=lambda: (
            f"at turn {peak.turn}: {peak.message_tokens:,} message + {peak.observation_tokens:,} "
            "observation tokens"
        ),
        note=f"at turn {peak.turn}: {peak.message_tokens:,} raw + {peak.observation_tokens:,} memory; "
        f"{sum(p.blocked for p in points)} of {len(points)} contexts waited on a model call",
    )
    near, far_ms = median(played.near_ms), median(played.far_ms)
    ratio = far_ms / near if near else float("nan")
    far_turn, near_turn = sum(played.far_turns) // 2, sum(plan.near) // 2
    bench.results.add(
        FLAT_SECTION,
        FLATNESS,
        ratio,
        target=Target.at_most(FLATNESS_TARGET),
        produced_by=SECTION,
        why=lambda: _flatness_why(played, plan.near, near, far_ms),
        note=f"median turn {far_ms:.0f} ms at turn ~{far_turn:,} ÷ {near:.0f} ms at turn ~{near_turn}; "
        + (
            "quick run: turns of a 200k-token thread, not turn 5,000 vs 100"
            if bench.quick
            else f"turns {lead_turns + 1}..{played.far_turns[0] - 1} loaded {plan.bulk_batch} exchanges "
            "per request"
        ),
    )
    bench.results.add(
        MEMORY_SECTION,
        COMPRESSION,
        final["compression"],
        target=Target.at_least(COMPRESSION_TARGET, "×"),
        produced_by=SECTION,
        why=lambda: (
            f"{final['covered_tokens']:,} covered tokens in a {final['observation_log_tokens']:,}-token log"
        ),
        note=f"{final['covered_tokens']:,} tokens of history → "
        f"{final['observation_log_tokens']:,}-token log, "
        f"generation {final['generation_count']}",
    )
    retention = len(final["kept"]) / len(final["facts"]) if final["facts"] else float("nan")
    bench.results.add(
        MEMORY_SECTION,
        RETENTION,
        retention * 100,
        target=Target.at_least(RETENTION_TARGET * 100, " %"),
        produced_by=SECTION,
        why=lambda: _retention_why(final),
        note=f"{len(final['kept'])}/{len(final['facts'])} kept"
        + (
            f"; superseded values still shown: {', '.join(final['superseded_values_still_shown'])}"
            if final["superseded_values_still_shown"]
            else ""
        ),
    )


def _flatness_why(played: Played, near_turns: tuple[int, int], near_ms: float, far_ms: float) -> str:
    near_log, far_log = _log_median(played, near_turns), _log_median(played, played.far_turns)
    text = (
        f"median {far_ms:.0f} ms vs {near_ms:.0f} ms; median unobserved window "
        f"{median(played.far_windows):,.0f} vs {median(played.near_windows):,.0f} tokens, observation log "
        f"{far_log:,.0f} vs {near_log:,.0f} tokens"
    )
    if far_log > 1.2 * near_log:
        text += " (every response carries the whole log, which reflection bounds but which is larger late)"
    return text


def _log_median(played: Played, window: tuple[int, int]) -> float:
    return median([p.status_observations for p in played.points if window[0] <= p.turn < window[1]])


def _retention_why(final: dict[str, Any]) -> str:
    """Which stage lost each missing fact: the local Observer never stated it, or a reflection dropped it."""
    reasons = []
    if final.get("observer_lost"):
        needles = ", ".join(f"{k} ({final['facts'][k]!r})" for k in final["observer_lost"])
        reasons.append(
            f"never in any Observer output: {needles} (the local Observer keeps a long message's best facts "
            "within a word budget and matches no paraphrase)"
        )
    if final.get("later_lost"):
        reasons.append(
            f"observed, then condensed away by a reflection: {', '.join(final['later_lost'])} "
            f"(generation {final['generation_count']}; the local Reflector loses detail faster than a model)"
        )
    return "; ".join(reasons) or f"missing {', '.join(final['missing'])}"
