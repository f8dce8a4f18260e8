"""Issue 28 items 3 and 4, as an attacker holding one ordinary tenant key: a tenant's JSON Schema is data.

Working-memory and extractor schemas with `$ref` to a loopback canary (http, https, ftp) or to a local
`file:` are refused where they are written (422 naming the keyword), and when written straight into the
database (as a config stored before the check existed would be) they are refused where they are used:
the canary hears nothing, the secret file's content is in no response and no event, a tarpit that
accepts and never answers holds no request thread. A pathological `pattern` runs in linear time on RE2
while `/healthz` keeps answering; a backreference is refused at write with the RE2 message; a local
`#/$defs/...` reference keeps working.

Runs on the real app (`create_app`, keys, inline executor, the offline model) on the test Postgres.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, update
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.store import schema as tables
from om_core.store.outbox import list_events
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id

pytestmark = [pytest.mark.postgres]

#: Every request below must answer within this; the old code waited on a tarpit forever.
ANSWER_DEADLINE_S = 15.0
#: The bound on validating 100k characters against `^(a+)+$` (backtracking would take longer than the age
#: of the universe; RE2 takes well under a millisecond).
REDOS_BOUND_S = 2.0


class Socket:
    """A loopback TCP listener that records every connection. `tarpit` ones accept and never answer (the
    connections are held until `close`); canaries close them at once."""

    def __init__(self, *, tarpit: bool = False) -> None:
        self.tarpit = tarpit
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                if self.tarpit:
                    self._connections.append(conn)
                else:
                    conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()
        with self._lock:
            for conn in self._connections:
                conn.close()


@pytest.fixture(scope="module")
def canary() -> Iterator[Socket]:
    listener = Socket()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def tarpit() -> Iterator[Socket]:
    listener = Socket(tarpit=True)
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A local JSON Schema whose `enum` holds a secret: a fetched copy would echo it in every error."""
    secret = f"TOPSECRET-{uuid.uuid4().hex}"
    path = tmp_path_factory.mktemp("secret") / "secret.json"
    path.write_text(f'{{"enum": ["{secret}"]}}')
    return path, secret


@dataclass
class Attacker:
    client: TestClient
    db: Engine
    tenant: str
    key: str

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.client.request(method, path, headers={"Authorization": f"Bearer {self.key}"}, **kwargs)

    def put_config(self, thread: str, overrides: dict[str, Any]) -> Any:
        return self.call(
            "PUT", f"/v1/threads/{thread}/config", json={"overrides": overrides, "resource_id": thread}
        )

    def store_config_bypassing_the_api(self, thread: str, overrides: dict[str, Any]) -> None:
        """What a config stored before the write check existed looks like: in the row, never checked."""
        assert self.put_config(thread, {}).status_code == 200
        with self.db.begin() as conn:
            changed = conn.execute(
                update(tables.threads)
                .where(tables.threads.c.id == scoped_id(self.tenant, thread))
                .values(config_overrides=overrides)
            ).rowcount
        assert changed == 1


@pytest.fixture(scope="module")
def attacker(postgres_url: str, pg_engine: Engine) -> Iterator[Attacker]:
    tenant = f"schemas-{uuid.uuid4().hex[:8]}"
    key = access.create_key(pg_engine, tenant, "attacker").secret
    settings = ApiSettings(
        database_url=postgres_url, auth="keys", executor="inline", model="om-local/extractive"
    )
    with TestClient(create_app(settings)) as client:
        yield Attacker(client, pg_engine, tenant, key)


def new_thread() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def remote_refs(canary: Socket, secret: Path) -> dict[str, str]:
    return {
        "http": f"http://127.0.0.1:{canary.port}/schema.json",
        "https": f"https://127.0.0.1:{canary.port}/schema.json",
        "ftp": f"ftp://127.0.0.1:{canary.port}/schema.json",
        "file": secret.as_uri(),
    }


def memory_config(field_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "workingMemory": {
            "enabled": True,
            "scope": "thread",
            "schema": {"type": "object", "properties": {"x": field_schema}},
        }
    }


def extractor_config(field_schema: dict[str, Any]) -> dict[str, Any]:
    """A structured extractor whose `name` property the offline model fills from "my name is ..." (so the
    value is validated against the tenant's schema when the extraction runs)."""
    schema = {"type": "object", "properties": {"name": {"type": "string", **field_schema}}}
    return {
        "observation": {
            "messageTokens": 200,
            "bufferTokens": False,
            "extract": [
                {"name": "Profile", "instructions": "Stable facts about the user.", "schema": schema}
            ],
        },
        "reflection": {"observationTokens": 100_000},
    }


def answered_within(deadline_s: float, request: Callable[[], Any]) -> Any:
    """The response of `request`, made on its own thread; fails (instead of hanging) when it does not
    answer in time, which is what a tarpit did to the old code."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(request())
        except BaseException as exc:  # the test thread re-raises it
            box.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=deadline_s)
    assert box, f"the request did not answer within {deadline_s} s (a request thread is held)"
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def chatter(i: int) -> str:
    return f"My name is Ada and my code is c{i}; " + " ".join(f"detail{(i * 7 + k) % 41}" for k in range(40))


def run_turns(attacker: Attacker, thread: str, count: int) -> list[Any]:
    answers = []
    for i in range(count):
        message = {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "text": chatter(i)}
        answers.append(
            answered_within(
                ANSWER_DEADLINE_S,
                lambda message=message: attacker.call(  # type: ignore[misc]
                    "POST", f"/v1/threads/{thread}/turns", json={"messages": [message], "resource_id": thread}
                ),
            )
        )
    return answers


# ------------------------------------------------------------------------------------ refused at write


@pytest.mark.parametrize("scheme", ["http", "https", "ftp", "file"])
@pytest.mark.parametrize("where", ["workingMemory", "extractor"])
def test_a_remote_ref_is_refused_where_it_is_written_and_nothing_is_fetched(
    attacker: Attacker, canary: Socket, secret_file: tuple[Path, str], scheme: str, where: str
) -> None:
    before = canary.accepted
    ref = remote_refs(canary, secret_file[0])[scheme]
    config = (memory_config if where == "workingMemory" else extractor_config)({"$ref": ref})
    answer = answered_within(ANSWER_DEADLINE_S, lambda: attacker.put_config(new_thread(), config))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    field = (
        "overrides.workingMemory.schema.properties.x.$ref"
        if where == "workingMemory"
        else "overrides.observation.extract[0].schema.properties.name.$ref"
    )
    assert error["field"] == field
    assert "only local references" in error["message"]
    assert secret_file[1] not in answer.text
    assert canary.accepted == before, "the server connected to the canary"


def test_a_dollar_id_cannot_make_a_relative_ref_remote(attacker: Attacker, canary: Socket) -> None:
    before = canary.accepted
    schema = {
        "$id": f"http://127.0.0.1:{canary.port}/base/",
        "type": "object",
        "properties": {"x": {"$ref": "other.json"}},
    }
    answer = attacker.put_config(new_thread(), {"workingMemory": {"enabled": True, "schema": schema}})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "overrides.workingMemory.schema.properties.x.$ref"
    assert canary.accepted == before


def test_an_unknown_dialect_is_refused_and_not_fetched(attacker: Attacker, canary: Socket) -> None:
    before = canary.accepted
    schema = {"$schema": f"http://127.0.0.1:{canary.port}/dialect", "type": "object"}
    answer = attacker.put_config(new_thread(), {"workingMemory": {"enabled": True, "schema": schema}})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "overrides.workingMemory.schema.$schema"
    assert canary.accepted == before


@pytest.mark.parametrize(
    ("pattern", "where"),
    [
        ({"type": "string", "pattern": "^(a+)\\1$"}, "properties.x.pattern"),
        (
            {"type": "object", "patternProperties": {"^(?=admin)": {}}},
            "properties.x.patternProperties.^(?=admin)",
        ),
    ],
    ids=["backreference", "lookahead"],
)
def test_a_regex_re2_cannot_run_is_refused_at_write_saying_so(
    attacker: Attacker, pattern: dict[str, Any], where: str
) -> None:
    for config, field in (
        (memory_config(pattern), f"overrides.workingMemory.schema.{where}"),
        (
            extractor_config(pattern),
            f"overrides.observation.extract[0].schema.{where.replace('.x.', '.name.')}",
        ),
    ):
        answer = attacker.put_config(new_thread(), config)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["field"] == field
        assert "RE2" in error["message"] and "backreferences" in error["message"]


def test_an_oversized_or_too_deep_schema_is_refused_at_write(attacker: Attacker) -> None:
    big = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 100} for i in range(1000)},
    }
    answer = attacker.put_config(new_thread(), {"workingMemory": {"enabled": True, "schema": big}})
    assert answer.status_code == 422, answer.text
    assert "bytes" in answer.json()["error"]["message"]

    deep: dict[str, Any] = {"type": "object"}
    for _ in range(60):
        deep = {"type": "object", "properties": {"d": deep}}
    answer = attacker.put_config(new_thread(), {"workingMemory": {"enabled": True, "schema": deep}})
    assert answer.status_code == 422, answer.text
    assert "nests deeper" in answer.json()["error"]["message"]


# ----------------------------------------------------------------------------------- refused at use


@pytest.mark.parametrize("scheme", ["http", "https", "ftp", "file"])
def test_a_stored_working_memory_schema_with_a_remote_ref_fetches_nothing_at_use(
    attacker: Attacker, canary: Socket, secret_file: tuple[Path, str], scheme: str
) -> None:
    before = canary.accepted
    thread = new_thread()
    ref = remote_refs(canary, secret_file[0])[scheme]
    attacker.store_config_bypassing_the_api(thread, memory_config({"$ref": ref}))
    path = f"/v1/threads/{thread}/working-memory"
    answers = [
        answered_within(
            ANSWER_DEADLINE_S, lambda: attacker.call("PUT", path, json={"content": {"x": "guess"}})
        ),
        answered_within(ANSWER_DEADLINE_S, lambda: attacker.call("GET", path)),
        answered_within(ANSWER_DEADLINE_S, lambda: attacker.call("GET", f"/v1/threads/{thread}/config")),
    ]
    assert answers[0].status_code == 422, answers[0].text
    assert "only local references" in answers[0].json()["error"]["message"]
    for answer in answers:
        assert secret_file[1] not in answer.text
    assert canary.accepted == before, "the server connected to the canary"
    events = list_events(attacker.db, thread_id=scoped_id(attacker.tenant, thread), limit=1000)
    assert not any(secret_file[1] in str(e.payload) for e in events)


@pytest.mark.parametrize("scheme", ["http", "file"])
def test_a_stored_extractor_schema_with_a_remote_ref_fetches_nothing_in_an_extraction_run(
    attacker: Attacker, canary: Socket, secret_file: tuple[Path, str], scheme: str
) -> None:
    before = canary.accepted
    thread = new_thread()
    ref = remote_refs(canary, secret_file[0])[scheme]
    attacker.store_config_bypassing_the_api(thread, extractor_config({"$ref": ref}))
    answers = run_turns(attacker, thread, 8)
    answers.append(attacker.call("GET", f"/v1/threads/{thread}"))
    for answer in answers:
        assert secret_file[1] not in answer.text
    assert canary.accepted == before, "the server connected to the canary"
    events = list_events(attacker.db, thread_id=scoped_id(attacker.tenant, thread), limit=1000)
    assert not any(secret_file[1] in str(e.payload) for e in events)


def _all_at_once(requests: list[Callable[[], Any]]) -> list[list[Any]]:
    """Each request on its own (daemon) thread, all started together; a box per request, empty when it
    has not answered by the deadline."""
    boxes: list[list[Any]] = [[] for _ in requests]

    def runner(box: list[Any], request: Callable[[], Any]) -> Callable[[], None]:
        return lambda: box.append(request())

    workers = [
        threading.Thread(target=runner(box, request), daemon=True)
        for box, request in zip(boxes, requests, strict=True)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + ANSWER_DEADLINE_S
    for worker in workers:
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
    return boxes


def test_a_tarpit_ref_holds_no_request_thread(attacker: Attacker, tarpit: Socket) -> None:
    """Written through the API and straight into the database: every request answers, none connects."""
    ref = f"http://127.0.0.1:{tarpit.port}/schema.json"
    stored = new_thread()
    attacker.store_config_bypassing_the_api(stored, memory_config({"$ref": ref}))
    path = f"/v1/threads/{stored}/working-memory"
    requests: list[Callable[[], Any]] = [
        lambda: attacker.put_config(new_thread(), memory_config({"$ref": ref})),
        lambda: attacker.put_config(new_thread(), extractor_config({"$ref": ref})),
    ] * 4 + [lambda: attacker.call("PUT", path, json={"content": {"x": "y"}})] * 4
    boxes = _all_at_once(requests)
    assert all(boxes), f"{sum(not box for box in boxes)} of {len(boxes)} requests are held"
    assert all(box[0].status_code == 422 for box in boxes), [box[0].text for box in boxes]
    assert tarpit.accepted == 0, "the server connected to the tarpit"
    assert attacker.client.get("/healthz").status_code == 200


# ------------------------------------------------------------------------------------------- ReDoS


def test_a_pathological_pattern_runs_in_linear_time_and_healthz_keeps_answering(attacker: Attacker) -> None:
    thread = new_thread()
    config = memory_config({"type": "string", "pattern": "^(a+)+$"})
    assert attacker.put_config(thread, config).status_code == 200, "RE2 runs this pattern: it is accepted"
    path = f"/v1/threads/{thread}/working-memory"
    value = "a" * 100_000 + "!"

    health: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            started = time.monotonic()
            assert attacker.client.get("/healthz").status_code == 200
            health.append(time.monotonic() - started)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        started = time.monotonic()
        answer = answered_within(
            ANSWER_DEADLINE_S, lambda: attacker.call("PUT", path, json={"content": {"x": value}})
        )
        took = time.monotonic() - started
    finally:
        stop.set()
        prober.join(timeout=ANSWER_DEADLINE_S)
    assert answer.status_code == 422, answer.text[:500]
    assert "does not match" in answer.json()["error"]["message"]
    assert took < REDOS_BOUND_S, f"validation took {took:.2f} s"
    assert health and max(health) < REDOS_BOUND_S, f"/healthz waited {max(health, default=0):.2f} s"

    good = attacker.call("PUT", path, json={"content": {"x": "a" * 60_000}})  # within the 64 KiB memory
    assert good.status_code == 200, good.text[:500]


def test_a_stored_backreference_pattern_is_refused_at_use_not_run(attacker: Attacker) -> None:
    thread = new_thread()
    attacker.store_config_bypassing_the_api(
        thread, memory_config({"type": "string", "pattern": "^(a+)+\\1$"})
    )
    started = time.monotonic()
    answer = answered_within(
        ANSWER_DEADLINE_S,
        lambda: attacker.call(
            "PUT", f"/v1/threads/{thread}/working-memory", json={"content": {"x": "a" * 40 + "!"}}
        ),
    )
    assert time.monotonic() - started < REDOS_BOUND_S
    assert answer.status_code == 422, answer.text
    assert "RE2" in answer.json()["error"]["message"]


# ----------------------------------------------------------------------------------- still works


def test_a_schema_with_local_refs_still_validates(attacker: Attacker) -> None:
    thread = new_thread()
    schema = {
        "$defs": {"city": {"type": "string", "pattern": "^[A-Z][a-z]+$"}},
        "type": "object",
        "properties": {"home": {"$ref": "#/$defs/city"}, "work": {"$ref": "#/$defs/city"}},
        "additionalProperties": False,
    }
    answer = attacker.put_config(
        thread, {"workingMemory": {"enabled": True, "scope": "thread", "schema": schema}}
    )
    assert answer.status_code == 200, answer.text
    path = f"/v1/threads/{thread}/working-memory"
    stored = attacker.call("PUT", path, json={"content": {"home": "London", "work": "Paris"}})
    assert stored.status_code == 200, stored.text
    refused = attacker.call("PUT", path, json={"content": {"home": "london"}})
    assert refused.status_code == 422, refused.text
    assert "home" in refused.json()["error"]["message"]
