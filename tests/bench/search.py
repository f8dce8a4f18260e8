"""Search: latency through the HTTP API over a large resource, indexing throughput, index lag after a burst.

**Latency.** One resource holds `messages` raw messages (100 threads; 100k in the full run) and one
observation group per 20 messages, bulk-loaded through storage (`history.append_messages`, group rows as
the engine writes them), not through turns: what is measured is search, not ingestion. The documents are
indexed and embedded in this process with the offline embedder. Then an API process (`om serve`, inline
executor, auth off, loopback) serves `POST /v1/resources/{id}/search` and one client times a fixed mix of
queries over keep-alive HTTP: exact codes planted in the history, natural-language questions of a few
vocabulary words, and misspelt names (which only the vector ranker can find). The database is the
pgvector Postgres of `scripts/testenv.py` (`OM_TEST_PGVECTOR_URL`: hybrid, lexical + HNSW) when it is
exported, the main Postgres otherwise (lexical only, said in the note), and a SQLite file with sqlite-vec
(hybrid). Targets: p50 ≤ 30 ms, p99 ≤ 100 ms.

**Indexing throughput.** The loading above runs `search.index.index_thread`, exactly what an `om.index`
worker runs per task, in this one process: messages indexed and embedded per second (documents, tsvector
or FTS5 rows, vectors and the HNSW index included).

**Index lag after a burst.** A burst of messages (10k in the full run) lands in 100 threads with retrieval
on; each thread's `IndexThread` is queued as their turns would queue them, and one worker process
(`om worker --queues om.index`) works through them. The figure is the time from the end of the burst until
`queries.index_lag` is back to 0 (every message a document, every document a vector).
"""

from __future__ import annotations

import os
import random
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import xxhash
from sqlalchemy import Engine, text

from om_adapters.celery_executor import CeleryExecutor
from om_core.engine import INDEX_QUEUE, IndexThread, new_cycle_id
from om_core.messages import Message, text_message
from om_core.models.client import ModelClient
from om_core.search import SearchRequest
from om_core.search.embedder import DEFAULT_EMBEDDING_MODEL, ModelEmbedder, effective_embedding_model
from om_core.search.index import index_lag_seconds, index_thread, track
from om_core.store import history, schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from tests.bench.harness import Bench
from tests.bench.results import FigureDef, Target, percentile
from tests.bench.stack import worker_cluster
from tests.support.api_server import run_api_server
from tests.support.workers import wait_until

SECTION = "search"
REDIS_DB = 15
THREADS = 100
GROUP_EVERY = 20
P50_TARGET_MS = 30.0
P99_TARGET_MS = 100.0


@dataclass(frozen=True)
class Plan:
    messages: int
    queries: int
    burst: int


PLANS = {True: Plan(messages=2_000, queries=120, burst=500), False: Plan(100_000, 600, 10_000)}


def _p50(db: str) -> FigureDef:
    return FigureDef(f"search p50, {db} (HTTP)", "ms")


def _p99(db: str) -> FigureDef:
    return FigureDef(f"search p99, {db} (HTTP)", "ms")


EMBED_RATE = FigureDef("messages indexed and embedded per second, one process (offline embedder)", "msg/s")


def _lag(quick: bool) -> FigureDef:
    return FigureDef(f"index lag after a burst of {PLANS[quick].burst:,} messages, one worker", "s")


def figures(quick: bool) -> list[FigureDef]:
    return [_p50("Postgres"), _p99("Postgres"), _p50("SQLite"), _p99("SQLite"), EMBED_RATE, _lag(quick)]


# ----------------------------------------------------------------------------------------------- corpus

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tas",
    "vo",
    "qui",
    "dor",
    "bel",
    "sa",
    "nu",
    "fre",
    "gal",
    "tor",
    "zen",
]
_COMMON = [
    "the",
    "a",
    "and",
    "to",
    "of",
    "in",
    "is",
    "it",
    "for",
    "on",
    "with",
    "that",
    "this",
    "was",
    "we",
    "you",
]


def _vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


@dataclass
class Corpus:
    """The history of one resource: per thread its messages, its groups, and what was planted where."""

    threads: list[list[Message]]
    groups: list[list[tuple[str, str, datetime]]]
    codes: list[str]
    names: list[str]
    vocabulary: list[str]


def build_corpus(messages: int, seed: int = 7) -> Corpus:
    rng = random.Random(seed)
    vocabulary = _vocabulary(rng)
    # Zipf-like: a few words are everywhere, most are rare, as in chat.
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    per_thread = max(messages // THREADS, 1)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    threads: list[list[Message]] = []
    groups: list[list[tuple[str, str, datetime]]] = []
    codes: list[str] = []
    names: list[str] = []
    for t in range(THREADS):
        rows: list[Message] = []
        thread_groups: list[tuple[str, str, datetime]] = []
        for i in range(per_thread):
            words = rng.choices(vocabulary, weights=weights, k=rng.randint(8, 30))
            words += rng.choices(_COMMON, k=rng.randint(2, 8))
            rng.shuffle(words)
            if rng.random() < 0.01:
                letters = "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ", k=2))
                code = f"{letters}-{rng.randint(10000, 99999)}"
                codes.append(code)
                words.insert(rng.randrange(len(words)), code)
            if rng.random() < 0.01:
                name = "".join(rng.choice(_SYLLABLES) for _ in range(4)).capitalize() + "ville"
                names.append(name)
                words.insert(rng.randrange(len(words)), name)
            at = start + timedelta(minutes=t * per_thread + i)
            rows.append(text_message(f"m{i}", "user" if i % 2 == 0 else "assistant", " ".join(words), at))
            if (i + 1) % GROUP_EVERY == 0:
                first = i + 1 - GROUP_EVERY
                summary = " ".join(rng.choices(vocabulary, weights=weights, k=25))
                thread_groups.append((f"m{first}:m{i}", f"User discussed {summary}.", at))
        threads.append(rows)
        groups.append(thread_groups)
    return Corpus(threads, groups, codes, names, vocabulary)


def queries(corpus: Corpus, count: int, seed: int = 11) -> list[str]:
    """A third exact codes, a third questions of vocabulary words, a third misspelt planted names."""
    rng = random.Random(seed)
    out = []
    for k in range(count):
        kind = k % 3
        if kind == 0 and corpus.codes:
            out.append(f"what was the reference {rng.choice(corpus.codes)}?")
        elif kind == 2 and corpus.names:
            name = rng.choice(corpus.names)
            cut = rng.randrange(1, len(name) - 1)
            out.append(f"trip to {name[:cut] + name[cut + 1 :]}")
        else:
            words = rng.sample(corpus.vocabulary[:800], rng.randint(2, 5))
            out.append("when did we talk about " + " ".join(words))
    return out


def _count(_part: object) -> tuple[float, float, int]:
    return (1.0, 0.0, 0)


def load(db: Engine, corpus: Corpus, resource: str, *, retrieval: dict[str, Any]) -> list[str]:
    """Store the corpus under `resource` (threads with `retrieval` in their config); the thread ids."""
    thread_ids = []
    for t, rows in enumerate(corpus.threads):
        thread_id = f"{resource}-t{t}"
        thread_ids.append(thread_id)
        with db.begin() as conn:
            history.append_messages(
                conn, thread_id=thread_id, resource_id=resource, incoming=rows, count_part=_count
            )
            history.set_resource_overrides(conn, resource, {"retrieval": retrieval})
            now = datetime.now(UTC)
            if corpus.groups[t]:
                conn.execute(
                    schema.observation_groups.insert(),
                    [
                        {
                            "id": xxhash.xxh64_hexdigest(f"{resource}:{t}:{g}".encode()),
                            "thread_id": thread_id,
                            "resource_id": resource,
                            "lookup_key": f"thread:{thread_id}",
                            "cycle_id": f"bench-{g}",
                            "kind": "observation",
                            "ranges": ranges,
                            "text": body,
                            "observed_at": at,
                            "created_at": now,
                        }
                        for g, (ranges, body, at) in enumerate(corpus.groups[t])
                    ],
                )
    return thread_ids


def _vector_support(db: Engine) -> bool:
    if db.dialect.name == "sqlite":
        from om_core.store.db import sqlite_vectors_available

        return sqlite_vectors_available()
    with db.connect() as conn:
        return (
            conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
            is not None
        )


@dataclass
class Measured:
    database: str
    vector: bool
    messages: int
    documents: int
    index_s: float
    latencies_ms: list[float]
    hits_per_query: float
    #: p50 / p99 of each ranker alone, in this process (ms): where a search's time goes.
    parts: dict[str, tuple[float, float]]

    def why(self) -> str:
        shown = ", ".join(
            f"{name} p50 {p50:.1f} / p99 {p99:.1f} ms" for name, (p50, p99) in self.parts.items()
        )
        return f"in-process, per ranker over the same queries: {shown}; the rest is HTTP, auth and JSON"


def measure(bench: Bench, database: str, url: str, plan: Plan, corpus: Corpus) -> Measured:
    db = make_engine(url)
    try:
        upgrade(db)
        vector = _vector_support(db)
        resource = f"search-{bench.run_id}-{database.lower()}"
        bench.say(f"search: loading {plan.messages:,} messages into {database} (vector: {vector})")
        thread_ids = load(db, corpus, resource, retrieval={"vector": vector})
        # The server's model, as the API process will read it (`OM_EMBEDDING_MODEL=om-local/hashing-embedding`
        # measures the fallback).
        model = effective_embedding_model(os.environ.get("OM_EMBEDDING_MODEL", DEFAULT_EMBEDDING_MODEL))
        embedder = ModelEmbedder(model, ModelClient(), batch_size=256) if vector else None
        started = time.perf_counter()
        documents = 0
        for thread_id in thread_ids:
            result = index_thread(db, thread_id, embedder, batch_size=256)
            documents += result.messages + result.groups
        index_s = time.perf_counter() - started
        if db.dialect.name == "postgresql":
            with db.begin() as conn:
                conn.execute(text("ANALYZE om_search_docs"))
        batch = queries(corpus, plan.queries)
        latencies, hits = serve_and_time(bench, database, url, resource, batch)
        parts = ranker_times(db, resource, batch, embedder)
        return Measured(database, vector, plan.messages, documents, index_s, latencies, hits, parts)
    finally:
        db.dispose()


def ranker_times(
    db: Engine, resource: str, batch: list[str], embedder: ModelEmbedder | None
) -> dict[str, tuple[float, float]]:
    """Each ranker alone on the same queries, in this process: the lexical query, the query's embedding,
    the nearest-neighbour query (on SQLite both sqlite-vec's scan and the in-memory one the API uses)."""
    from om_core.search import lexical, vectors
    from om_core.search.vector_cache import VectorCache

    timings: dict[str, list[float]] = {"lexical": [], "embedding": [], "vector": [], "vector, in memory": []}
    cache = VectorCache(1024 * 1024 * 1024) if db.dialect.name == "sqlite" else None
    with db.connect() as conn:
        for query in batch:
            request = SearchRequest(resource_id=resource, query=query, limit=10)
            started = time.perf_counter()
            lexical.rank(conn, request, 30)
            timings["lexical"].append((time.perf_counter() - started) * 1000)
            if embedder is None:
                continue
            started = time.perf_counter()
            vector = embedder.embed([query])[0]
            timings["embedding"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            vectors.nearest(conn, resource, vector, 30)
            timings["vector"].append((time.perf_counter() - started) * 1000)
            if cache is None:
                continue
            cache_started = time.perf_counter()
            vectors.nearest(conn, resource, vector, 30, cache=cache)
            timings["vector, in memory"].append((time.perf_counter() - cache_started) * 1000)
    return {
        name: (percentile(values, 50), percentile(values, 99)) for name, values in timings.items() if values
    }


def serve_and_time(
    bench: Bench, database: str, url: str, resource: str, batch: list[str]
) -> tuple[list[float], float]:
    env = {"OM_AUTH": "none", "OM_EXECUTOR": "inline", "OM_PLUGINS": "", "OM_API_THREADS": "8"}
    workdir = bench.workdir / f"search-api-{database.lower()}"
    with run_api_server(url, bench.services.redis_url, workdir, env=env, om_serve=True) as api:
        path = f"{api.base_url}/v1/resources/{resource}/search"
        with httpx.Client(timeout=60) as client:
            for query in batch[:20]:  # warm up: connections, caches, the embedder's first call
                client.post(path, json={"query": query, "limit": 10}).raise_for_status()
            latencies = []
            hits = 0
            for query in batch:
                started = time.perf_counter()
                response = client.post(path, json={"query": query, "limit": 10})
                latencies.append((time.perf_counter() - started) * 1000)
                response.raise_for_status()
                hits += int(response.json()["count"])
    return latencies, hits / max(len(batch), 1)


# ------------------------------------------------------------------------------------------------ burst


def measure_burst(bench: Bench, url: str, burst: int) -> tuple[float, float]:
    """Seconds from the end of a burst of `burst` messages until the index lag is 0, with one `om.index`
    worker process; and the largest lag seen meanwhile."""
    db = make_engine(url)
    vector = _vector_support(db)
    resource = f"burst-{bench.run_id}"
    corpus = build_corpus(burst, seed=23)
    workdir = bench.workdir / "search-burst"
    try:
        with worker_cluster(bench.services, workdir, redis_db=REDIS_DB) as cluster:
            # The index worker works on the database under test (the pgvector one when there is one).
            cluster.postgres_url = url
            cluster.env["OM_DATABASE_URL"] = url
            [worker] = cluster.start_workers([([INDEX_QUEUE], 2)])
            executor = CeleryExecutor(cluster.app)
            thread_ids = load(db, corpus, resource, retrieval={"vector": vector})
            burst_end = time.monotonic()
            track(db, thread_ids)  # what a turn's request does before it queues the task
            for thread_id in thread_ids:
                executor.submit(IndexThread(thread_id, new_cycle_id("index")))
            peak = 0.0

            def caught_up() -> bool:
                nonlocal peak
                lag = index_lag_seconds(db)
                peak = max(peak, lag)
                return lag == 0.0 and _all_indexed(db, thread_ids)

            wait_until(caught_up, deadline_s=1800, what="the index to catch up", every_s=0.25)
            cluster.stop([worker])
            return time.monotonic() - burst_end, peak
    finally:
        db.dispose()


def _all_indexed(db: Engine, thread_ids: list[str]) -> bool:
    """Every thread's messages are documents (the lag counts only threads already indexed once)."""
    with db.connect() as conn:
        done = conn.execute(
            text(
                "SELECT count(*) FROM om_threads t JOIN om_index_state s ON s.thread_id = t.id "
                "WHERE t.resource_id = :r AND s.message_seq >= t.last_seq"
            ),
            {"r": thread_ids[0].rsplit("-t", 1)[0]},
        ).scalar()
    return int(done or 0) == len(thread_ids)


# ------------------------------------------------------------------------------------------------- run


def run(bench: Bench) -> None:
    plan = PLANS[bench.quick]
    corpus = build_corpus(plan.messages)
    pg_url = os.environ.get("OM_TEST_PGVECTOR_URL") or bench.services.database_url
    sqlite_url = f"sqlite:///{Path(bench.workdir) / f'search-{bench.run_id}.db'}"
    measured = [
        measure(bench, "Postgres", pg_url, plan, corpus),
        measure(bench, "SQLite", sqlite_url, plan, corpus),
    ]
    for m in measured:
        mode = "hybrid (lexical + vectors)" if m.vector else "lexical only (no pgvector on this server)"
        note = (
            f"{len(m.latencies_ms)} queries over {m.messages:,} messages + groups "
            f"({m.documents:,} documents), "
            f"{mode}, {m.hits_per_query:.1f} hits per query; mean {statistics.fmean(m.latencies_ms):.1f} ms"
        )
        bench.results.add(
            SECTION,
            _p50(m.database),
            percentile(m.latencies_ms, 50),
            target=Target.at_most(P50_TARGET_MS, " ms"),
            why=m.why,
            note=note,
        )
        bench.results.add(
            SECTION,
            _p99(m.database),
            percentile(m.latencies_ms, 99),
            target=Target.at_most(P99_TARGET_MS, " ms"),
            why=m.why,
            note=note,
        )
    pg = measured[0]
    bench.results.add(
        SECTION,
        EMBED_RATE,
        pg.messages / pg.index_s,
        note=f"{pg.documents:,} documents ({pg.messages:,} messages and their groups) in {pg.index_s:.1f} s "
        f"on Postgres{' with pgvector' if pg.vector else ' (lexical only)'}; SQLite "
        f"{measured[1].messages / measured[1].index_s:,.0f} msg/s",
    )
    bench.say(f"search: a burst of {plan.burst:,} messages, one om.index worker")
    seconds, peak = measure_burst(bench, pg_url, plan.burst)
    bench.results.add(
        SECTION,
        _lag(bench.quick),
        seconds,
        note=f"from the end of the burst until the lag metric read 0 (largest lag read: {peak:.1f} s); "
        "one worker process, concurrency 2, offline embedder",
    )
    bench.section_meta(
        SECTION,
        plan=vars(plan),
        databases=[{"database": m.database, "vector": m.vector, "index_s": m.index_s} for m in measured],
    )
