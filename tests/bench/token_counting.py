"""Token counting: o200k speed, and how often a long thread's parts are counted again.

Speed is measured the way the service counts: part by part (a user message, a reply, a tool result) on
the benchmark conversation, after the encoding is loaded. The cache figure drives one long thread through
the engine in this process (inline executor, local model, Postgres) so the counter's own
`cache_hits`/`cache_misses` are visible: every part should be tokenised once, when it is stored, and read
from its stored estimate whenever it is counted again (the Observer's input sizing). The counter also
tallies every byte it tokenises, so re-tokenisation outside the part cache shows up as a factor > 1.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import MemoryEngine
from om_core.models.client import ModelClient
from om_core.tokens import TokenCounter
from tests.bench.conversations import BenchConversation, generate
from tests.bench.harness import Bench
from tests.bench.results import FigureDef
from tests.bench.stack import REPO

SECTION = "tokens"
FULL_THREAD_TOKENS = 200_000
QUICK_THREAD_TOKENS = 40_000
SPEED_TOKENS = {True: 200_000, False: 1_000_000}
COUNTING_SPEED = FigureDef("o200k counting speed (per part)", "MB/s")
PART_CACHE_HIT_RATE = FigureDef("part-cache hit rate over a long thread", "%")
RETOKENISATION = FigureDef("bytes tokenised ÷ bytes stored", "×")


def figures(quick: bool) -> list[FigureDef]:
    """The figures `run` reports, in order."""
    return [COUNTING_SPEED, PART_CACHE_HIT_RATE, RETOKENISATION]


class TallyingCounter(TokenCounter):
    """A `TokenCounter` that remembers how much text it tokenised, and for which caller: the first frame
    outside the token package (so a re-count shows up under the engine function that asked for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokenised_bytes = 0
        self.tokenise_calls = 0
        self.bytes_by_caller: Counter[str] = Counter()

    def count_string(self, s: str | None) -> int:
        if s:
            size = len(s.encode("utf-8", "surrogatepass"))
            self.tokenised_bytes += size
            self.tokenise_calls += 1
            self.bytes_by_caller[_caller()] += size
        return super().count_string(s)


def _caller() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if "om_core/tokens/" not in path and not path.endswith("token_counting.py"):
            where = path.removeprefix(str(REPO) + "/")
            return f"{where}:{frame.f_code.co_qualname}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


@dataclass(frozen=True)
class Speed:
    megabytes: float
    seconds: float
    tokens: int

    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.seconds


def _payloads(conversation: BenchConversation) -> list[str]:
    texts = []
    for message in conversation.messages:
        for part in message.parts:
            if part.text:
                texts.append(part.text)
            if part.result is not None:
                texts.append(
                    part.result if isinstance(part.result, str) else json.dumps(part.result, indent=2)
                )
    return texts


def measure_speed(tokens: int) -> Speed:
    texts = _payloads(generate(seed=31, target_tokens=tokens))
    counter = TokenCounter()
    counter.count_string("warm up: load the o200k encoding before the clock starts")
    size = sum(len(t.encode()) for t in texts) / 1e6
    started = time.perf_counter()
    counted = sum(counter.count_string(t) for t in texts)
    return Speed(size, time.perf_counter() - started, counted)


def measure_cache(bench: Bench, tokens: int) -> dict[str, Any]:
    counter = TallyingCounter()
    config = ObservationalMemoryConfig.parse({"model": "om-local/extractive"})
    engine = MemoryEngine(bench.services.db, models=ModelClient(), config=config, counter=counter)
    conversation = generate(seed=41, target_tokens=tokens)
    thread_id = f"tokens-{bench.run_id}"
    stored_bytes = 0
    parts = 0
    for message in conversation.messages:
        engine.ingest_turn(thread_id, f"tokens-user-{bench.run_id}", [message])
        for part in message.parts:
            parts += 1
            if part.text:
                stored_bytes += len(part.text.encode())
            if part.result is not None:
                stored_bytes += len(json.dumps(part.result, indent=2).encode())
    lookups = counter.cache_hits + counter.cache_misses
    return {
        "parts": parts,
        "cache_hits": counter.cache_hits,
        "cache_misses": counter.cache_misses,
        "hit_rate": counter.cache_hits / lookups if lookups else float("nan"),
        "misses_per_part": counter.cache_misses / parts if parts else float("nan"),
        "tokenised_bytes": counter.tokenised_bytes,
        "stored_bytes": stored_bytes,
        "tokenise_calls": counter.tokenise_calls,
        "retokenisation_factor": counter.tokenised_bytes / stored_bytes if stored_bytes else float("nan"),
        "tokenised_bytes_by_caller": dict(counter.bytes_by_caller.most_common()),
    }


def run(bench: Bench) -> None:
    speed_tokens = SPEED_TOKENS[bench.quick]
    bench.say(f"tokens: o200k speed over {speed_tokens:,} tokens of parts")
    speed = measure_speed(speed_tokens)
    thread_tokens = QUICK_THREAD_TOKENS if bench.quick else FULL_THREAD_TOKENS
    bench.say(f"tokens: part-cache behaviour over a {thread_tokens:,}-token thread (in-process engine)")
    cache = measure_cache(bench, thread_tokens)
    bench.section_meta(SECTION, speed=vars(speed) | {"mb_per_s": speed.mb_per_s}, cache=cache)
    bench.results.add(
        SECTION,
        COUNTING_SPEED,
        speed.mb_per_s,
        note=f"{speed.megabytes:.1f} MB, {speed.tokens:,} tokens in {speed.seconds:.2f} s "
        f"({speed.tokens / speed.seconds / 1e6:.2f} M tokens/s), one thread",
    )
    bench.results.add(
        SECTION,
        PART_CACHE_HIT_RATE,
        cache["hit_rate"] * 100,
        note=f"{cache['cache_hits']:,} hits, {cache['cache_misses']:,} misses for {cache['parts']:,} parts "
        f"({cache['misses_per_part']:.2f} tokenisations per part) over {thread_tokens // 1000}k tokens",
    )
    bench.results.add(
        SECTION,
        RETOKENISATION,
        cache["retokenisation_factor"],
        note="1.0 = every stored byte tokenised once; by caller: "
        + ", ".join(
            f"{name.split(':')[-1]} {size / cache['stored_bytes']:.2f}×"
            for name, size in list(cache["tokenised_bytes_by_caller"].items())[:4]
        ),
    )
