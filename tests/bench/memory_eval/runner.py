"""Plays a generated conversation through the real HTTP API and measures what each question's answer
is found in.

Two scopes:

- `thread`: every session in one thread; after the last turn, one more user message in that thread gives
  the final context; search is `POST /v1/threads/{id}/search`.
- `resource`: each session its own thread of one resource (`scope: "resource"`, one observation log for
  the user); a user message in a new thread of the resource gives the context; search is
  `POST /v1/resources/{id}/search`.

The memory config is set on the resource (`PUT /v1/resources/{id}/config`) before the first turn: the
thresholds (`messageTokens`, `observationTokens`) and retrieval (indexing and search; `vector` where the
database has pgvector). Turns are posted one exchange (user message and reply) per call, in order, with
their session's dates. Before anything is measured the workers must go idle and every thread be indexed
(waited for with deadlines, never a fixed sleep).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import Engine, and_, exists, select, text

from om_core.search.index import track
from om_core.store import schema
from om_core.tenancy.scoped_ids import PublicId, StoredId, scoped_id
from om_core.tokens import TokenCounter
from tests.bench.memory_eval.conversation import Conversation, Turn, contains
from tests.bench.memory_eval.scoring import context_text, shares, truncate
from tests.support.workers import wait_until

SCOPES = ("thread", "resource")
MESSAGE_TOKENS = 3000
OBSERVATION_TOKENS = 4000
SEARCH_LIMIT = 10
#: The message that asks for the final context: it states nothing any question needs.
PROBE = "Quick check before we carry on: can you remind me what we talked about?"


@dataclass
class Stack:
    """What the runner needs of a running stack: the API, a key, the database, and the workers."""

    base_url: str
    api_key: str
    tenant: str
    db: Engine
    #: Queue an `IndexThread` task for a stored thread id (on the workers' broker).
    submit_index: Callable[[StoredId], None]
    #: True when no OM work is queued or running.
    drained: Callable[[], bool]
    settle_deadline_s: float = 600.0


@dataclass
class ScopeResult:
    scope: str
    rows: list[dict[str, Any]]
    context_tokens: int
    truncation_tokens: int
    #: The text measured, for a reader who wants to see why a question was missed.
    context: str
    truncation: str
    newest_turn_in_context: bool
    #: Whether search ranked by the embedder too (retrieval.vector), or by words only.
    vector: bool = False
    search_error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def shares(self) -> dict[str, dict[str, float]]:
        return shares(self.rows)

    def as_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "shares": self.shares(),
            "context_tokens": self.context_tokens,
            "truncation_tokens": self.truncation_tokens,
            "newest_turn_in_context": self.newest_turn_in_context,
            "vector": self.vector,
            "search_error": self.search_error,
            "seconds": self.seconds,
            "questions": self.rows,
        }


def memory_config(
    scope: str,
    *,
    vector: bool,
    message_tokens: int = MESSAGE_TOKENS,
    observation_tokens: int = OBSERVATION_TOKENS,
) -> dict[str, Any]:
    return {
        "scope": scope,
        "observation": {"messageTokens": message_tokens},
        "reflection": {"observationTokens": observation_tokens},
        "retrieval": {"vector": vector},
    }


def vector_support(db: Engine) -> bool:
    """Whether the database can search by vectors (pgvector on Postgres, sqlite-vec on SQLite)."""
    if db.dialect.name == "sqlite":
        from om_core.store.db import sqlite_vectors_available

        return sqlite_vectors_available()
    with db.connect() as conn:
        found = conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
        return found is not None


class _Api:
    def __init__(self, stack: Stack) -> None:
        self.http = httpx.Client(
            base_url=stack.base_url, headers={"Authorization": f"Bearer {stack.api_key}"}, timeout=120
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        response = self.http.request(method, path, json=dict(body))
        if response.status_code != 200:
            raise ApiError(
                response.status_code, f"{method} {path}: {response.status_code} {response.text[:400]}"
            )
        data: dict[str, Any] = response.json()
        return data

    def turns(
        self, thread: str, resource: str, messages: list[dict[str, Any]], context: str
    ) -> dict[str, Any]:
        body = {"messages": messages, "resource_id": resource, "context": context}
        return self.call("POST", f"/v1/threads/{quote(thread, safe='')}/turns", body)


class ApiError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _indexed(db: Engine, thread_ids: Sequence[StoredId]) -> bool:
    """Every message and observation group of these threads has its search document, and every document
    of a vector-searching thread its vector."""
    T, S, G, D = schema.threads, schema.index_state, schema.observation_groups, schema.search_docs
    ids = list(thread_ids)
    with db.connect() as conn:
        behind = conn.execute(
            select(T.c.id)
            .select_from(T.outerjoin(S, S.c.thread_id == T.c.id))
            .where(T.c.id.in_(ids), (S.c.message_seq.is_(None)) | (S.c.message_seq < T.c.last_seq))
            .limit(1)
        ).first()
        if behind is not None:
            return False
        has_doc = exists().where(
            and_(D.c.thread_id == G.c.thread_id, D.c.kind == "group", D.c.ref == G.c.id, D.c.text == G.c.text)
        )
        group = conn.execute(select(G.c.id).where(G.c.thread_id.in_(ids), ~has_doc).limit(1)).first()
        if group is not None:
            return False
        unembedded = conn.execute(
            select(D.c.id)
            .select_from(D.join(S, S.c.thread_id == D.c.thread_id))
            .where(D.c.thread_id.in_(ids), S.c.vector.is_(True), D.c.embedding_model.is_(None))
            .limit(1)
        ).first()
        return unembedded is None


def settle(stack: Stack, thread_ids: Sequence[str]) -> float:
    """Wait for the workers to go idle, then for every thread to be indexed; the seconds waited."""
    started = time.monotonic()
    wait_until(stack.drained, deadline_s=stack.settle_deadline_s, what="the workers to go idle", every_s=0.2)
    stored = [scoped_id(stack.tenant, PublicId(t)) for t in thread_ids]
    track(stack.db, stored)
    for thread in stored:
        stack.submit_index(thread)

    def done() -> bool:
        return stack.drained() and _indexed(stack.db, stored)

    wait_until(done, deadline_s=stack.settle_deadline_s, what="every thread to be indexed", every_s=0.2)
    return time.monotonic() - started


def _probe_message(prefix: str, after: datetime.datetime) -> dict[str, Any]:
    return {
        "id": f"{prefix}-probe",
        "role": "user",
        "parts": [{"type": "text", "text": PROBE}],
        "created_at": (after + datetime.timedelta(hours=2)).isoformat(),
    }


def _post_session(
    api: _Api, conversation: Conversation, turns: Sequence[Turn], thread: str, resource: str, prefix: str
) -> None:
    for start in range(0, len(turns), 2):
        exchange = [conversation.message_body(t, prefix) for t in turns[start : start + 2]]
        api.turns(thread, resource, exchange, "none")


def play_scope(
    stack: Stack,
    conversation: Conversation,
    scope: str,
    run_id: str,
    *,
    vector: bool,
    message_tokens: int = MESSAGE_TOKENS,
    observation_tokens: int = OBSERVATION_TOKENS,
    on_progress: Callable[[str], None] = lambda _: None,
) -> ScopeResult:
    """Post the conversation in `scope`, settle, and measure every question."""
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r} is none of {SCOPES}")
    resource = f"mem-eval-{run_id}-{scope}"
    prefix = f"{resource}-c"
    api = _Api(stack)
    seconds: dict[str, float] = {}
    try:
        config = memory_config(
            scope, vector=vector, message_tokens=message_tokens, observation_tokens=observation_tokens
        )
        api.call("PUT", f"/v1/resources/{quote(resource, safe='')}/config", {"overrides": config})
        started = time.monotonic()
        if scope == "thread":
            threads = [f"{resource}-all"]
            _post_session(api, conversation, conversation.turns, threads[0], resource, prefix)
            ask = threads[0]
        else:
            threads = [f"{resource}-s{s}" for s in range(conversation.sessions)]
            for session, thread in enumerate(threads):
                _post_session(
                    api, conversation, conversation.session_turns(session), thread, resource, prefix
                )
                on_progress(f"{scope} scope: session {session + 1}/{conversation.sessions} posted")
            ask = f"{resource}-new"
        seconds["post"] = time.monotonic() - started
        on_progress(
            f"{scope} scope: {len(conversation.turns)} turns posted in {seconds['post']:.0f} s; settling"
        )
        seconds["settle"] = settle(stack, threads)
        started = time.monotonic()
        answer = api.turns(ask, resource, [_probe_message(prefix, conversation.turns[-1].at)], "full")
        measured = _measure(api, conversation, scope, resource, ask, answer["context"])
        seconds["measure"] = time.monotonic() - started
        measured.seconds = seconds
        measured.vector = vector
        return measured
    finally:
        api.close()


def _measure(
    api: _Api, conversation: Conversation, scope: str, resource: str, thread: str, context: Mapping[str, Any]
) -> ScopeResult:
    counter = TokenCounter()
    visible = context_text(context)
    budget = max(0, counter.count_string(visible) - counter.count_string(PROBE))
    baseline, baseline_tokens = truncate([t.text for t in conversation.turns], budget, counter)
    if scope == "thread":
        search_path = f"/v1/threads/{quote(thread, safe='')}/search"
    else:
        search_path = f"/v1/resources/{quote(resource, safe='')}/search"
    rows: list[dict[str, Any]] = []
    search_error: str | None = None
    for question in conversation.questions:
        found = ""
        if search_error is None:
            try:
                results = api.call("POST", search_path, {"query": question.text, "limit": SEARCH_LIMIT})
                found = "\n".join(str(r.get("text", "")) for r in results["results"][:SEARCH_LIMIT])
            except ApiError as exc:
                search_error = str(exc)  # reported beside the figures; every search counts as a miss
        rows.append(
            {
                "kind": question.kind,
                "key": question.key,
                "question": question.text,
                "answers": list(question.answers),
                "stale": list(question.stale),
                "context": question.answered(visible),
                "truncation": question.answered(baseline),
                "search": bool(found) and question.answered(found),
                # Both parts of a multi-session answer may come one from each.
                "context_or_search": question.answered(f"{visible}\n{found}"),
                "stale_in_context": any(contains(visible, s) for s in question.stale),
            }
        )
    newest = conversation.turns[-1].text
    return ScopeResult(
        scope=scope,
        rows=rows,
        context_tokens=budget,
        truncation_tokens=baseline_tokens,
        context=visible,
        truncation=baseline,
        newest_turn_in_context=newest in visible,
        search_error=search_error,
    )


def evaluate(
    stack: Stack,
    conversation: Conversation,
    run_id: str,
    *,
    scopes: Sequence[str] = SCOPES,
    vector: bool | None = None,
    message_tokens: int | None = None,
    observation_tokens: int | None = None,
    on_progress: Callable[[str], None] = lambda _: None,
) -> dict[str, ScopeResult]:
    """Every scope's result, by scope name. Thresholds default to the conversation size's; `vector` to
    whether the database has vector search."""
    use_vector = vector_support(stack.db) if vector is None else vector
    return {
        scope: play_scope(
            stack,
            conversation,
            scope,
            run_id,
            vector=use_vector,
            message_tokens=message_tokens or conversation.size.message_tokens,
            observation_tokens=observation_tokens or conversation.size.observation_tokens,
            on_progress=on_progress,
        )
        for scope in scopes
    }
