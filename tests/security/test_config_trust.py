"""A tenant key's config reaches no sink the operator did not open (issue 28, items 1 and 5).

As the attacker of the issue: one ordinary tenant key against the real app (`OM_AUTH=keys`, SQLite, the
inline executor, `OPENAI_API_KEY` set on the server). A loopback listener plays the host the attacker
names and records what it hears. Each attack is tried where a key writes config (a 422 naming the option)
and as a config already stored (written straight into the database, as before this rule existed): then
the memory-model call is refused, its failed event says why, and the listener hears nothing. Positive
controls show the same path does reach the listener, with the server's key, when the operator configures
it, so the tests can fail.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, update
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings
from om_core.config import options as om_config
from om_core.config.settings import Settings
from om_core.config.trust import OPTION_RULES
from om_core.store import schema
from om_core.store.db import make_engine
from om_core.store.migrate import upgrade
from om_core.tenancy import access
from om_core.tenancy.scoped_ids import scoped_id
from tests.support.listener import Listener, listening

SERVER_KEY = "sk-server-secret-0123456789"
TENANT = "acme"
#: Enough words to pass a 30-token threshold in one message.
LONG = " ".join(f"word{i}" for i in range(80))


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    with listening() as heard:
        monkeypatch.setenv("OPENAI_API_KEY", SERVER_KEY)
        yield heard


class Server:
    def __init__(self, client: TestClient, db: Engine, key: str) -> None:
        self.client, self.db, self.headers = client, db, {"Authorization": f"Bearer {key}"}
        self.threads: set[str] = set()

    def put_config(self, thread: str, overrides: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if thread not in self.threads:
            self.turn(thread, "hello")
        response = self.client.put(
            f"/v1/threads/{thread}/config", json={"overrides": overrides}, headers=self.headers
        )
        return response.status_code, response.json()

    def put_resource_config(self, resource: str, overrides: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        response = self.client.put(
            f"/v1/resources/{resource}/config", json={"overrides": overrides}, headers=self.headers
        )
        return response.status_code, response.json()

    def turn(self, thread: str, text: str) -> dict[str, Any]:
        response = self.client.post(
            f"/v1/threads/{thread}/turns",
            json={"messages": [{"role": "user", "text": text}], "context": "none"},
            headers=self.headers,
        )
        assert response.status_code == 200, response.text
        self.threads.add(thread)
        body: dict[str, Any] = response.json()
        return body

    def observe(self, thread: str) -> dict[str, Any]:
        response = self.client.post(
            f"/v1/threads/{thread}/observe", json={"wait": True}, headers=self.headers
        )
        body: dict[str, Any] = response.json()
        return body

    def store_config(self, thread: str, overrides: dict[str, Any]) -> None:
        """As a config written before the rule existed: straight into the thread's row."""
        with self.db.begin() as conn:
            changed = conn.execute(
                update(schema.threads)
                .where(schema.threads.c.id == scoped_id(TENANT, thread))
                .values(config_overrides=overrides)
            ).rowcount
        assert changed == 1


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Any]:
    opened: list[TestClient] = []

    def build(**settings: Any) -> Server:
        url = f"sqlite:///{tmp_path / f'om{len(opened)}.db'}"
        db = make_engine(url)
        upgrade(db)
        key = access.create_key(db, TENANT, "attacker").secret
        values: dict[str, Any] = {"database_url": url, "auth": "keys", **SERVER_DEFAULTS}
        if "config" not in settings:
            values["model"] = "om-local/extractive"
        client = TestClient(create_app(ApiSettings(**{**values, **settings})))
        client.__enter__()
        opened.append(client)
        return Server(client, db, key)

    yield build
    for client in opened:
        client.__exit__(None, None, None)


#: A fresh server's bounds (the suite's conftest lowers them in the environment for the other tests).
SERVER_DEFAULTS = {
    name: Settings.model_fields[name].default
    for name in ("memory_min_tokens", "memory_min_buffer_tokens", "memory_max_output_tokens")
}
#: The bounds that let a 30-token threshold through, so the option under test is what refuses.
LOW_FLOORS = {"memory_min_tokens": 1, "memory_min_buffer_tokens": 1}


def _attack(listener: Listener, phase: str, options: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "openai/gpt-4o-mini",
        "observation": {"messageTokens": 30, "bufferTokens": False},
        phase: {
            **({"messageTokens": 30, "bufferTokens": False} if phase == "observation" else {}),
            "providerOptions": json.loads(json.dumps(options).replace("LISTENER", listener.url + "/v1")),
        },
    }


PROVIDER_OPTION_ATTACKS = [
    pytest.param("observation", {"litellm": {"api_base": "LISTENER"}}, "litellm", id="api_base"),
    pytest.param(
        "reflection", {"litellm": {"base_url": "LISTENER", "api_key": "x"}}, "litellm", id="base_url"
    ),
    pytest.param(
        "observation",
        {"litellm": {"input_cost_per_token": 0, "output_cost_per_token": 0}},
        "litellm",
        id="prices",
    ),
    pytest.param("observation", {"litellm": {"extra_headers": {"X-Internal": "1"}}}, "litellm", id="headers"),
    pytest.param("observation", {"openai": {"serviceTier": "priority"}}, "openai.serviceTier", id="tier"),
]


@pytest.mark.parametrize(("phase", "options", "option"), PROVIDER_OPTION_ATTACKS)
def test_a_provider_passthrough_is_refused_where_it_is_written(
    make_server: Any, listener: Listener, phase: str, options: dict[str, Any], option: str
) -> None:
    server = make_server(**LOW_FLOORS)
    status, body = server.put_config("t1", _attack(listener, phase, options))
    assert status == 422, body
    assert body["error"]["field"] == f"overrides.{phase}.providerOptions.{option}"
    assert "operator" in body["error"]["message"]
    status, body = server.put_resource_config("r1", {phase: {"providerOptions": options}})
    assert status == 422 and body["error"]["field"] == f"overrides.{phase}.providerOptions.{option}", body
    server.turn("t1", LONG)
    assert listener.received == []


def test_the_snake_case_spelling_is_refused_too(make_server: Any, listener: Listener) -> None:
    server = make_server(**LOW_FLOORS)
    overrides = {"observation": {"provider_options": {"litellm": {"api_base": listener.url}}}}
    status, body = server.put_config("t1", overrides)
    assert status == 422 and body["error"]["field"] == "overrides.observation.providerOptions.litellm", body


def test_a_stored_passthrough_sends_nothing_and_says_why(make_server: Any, listener: Listener) -> None:
    """The issue's reproduction, as a config stored before the rule: the server's key would have gone to
    the listener, and its answer would have become the thread's observations."""
    server = make_server(**LOW_FLOORS)
    server.turn("t1", "hello")
    server.store_config("t1", _attack(listener, "observation", {"litellm": {"api_base": "LISTENER"}}))
    answer = server.turn("t1", LONG)
    result = server.observe("t1")
    assert listener.received == []
    failed = [e for e in result.get("events", []) if e["type"] == "data-om-observation-failed"]
    assert failed, result
    assert "CONFIG_REFUSED" in json.dumps(failed) and "providerOptions.litellm" in json.dumps(failed)
    assert answer["status"] is not None, "the turn itself went on"


def test_positive_control_the_operators_own_passthrough_reaches_the_listener(
    make_server: Any, listener: Listener
) -> None:
    """The same options in the operator's OM_CONFIG do reach the listener, with the server's key: the path
    the tests above watch is live."""
    operator_config = {
        "model": "openai/gpt-4o-mini",
        "observation": {
            "messageTokens": 30,
            "bufferTokens": False,
            "providerOptions": {"litellm": {"api_base": listener.url + "/v1"}},
        },
    }
    server = make_server(config=json.dumps(operator_config), model_retry_max_retries=0)
    server.turn("t1", LONG)
    server.observe("t1")
    assert listener.received, "the operator's passthrough is called"
    assert listener.received[0].header("Authorization") == f"Bearer {SERVER_KEY}"


# ----------------------------------------------------------------------------------------------- models


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch, listener: Listener) -> Listener:
    """A self-hosted model server on the server's network, where litellm's `hosted_vllm` finds it."""
    monkeypatch.setenv("HOSTED_VLLM_API_BASE", listener.url + "/v1")
    return listener


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"model": "hosted_vllm/x"}, "model"),
        ({"model": None, "observation": {"model": "ollama/llama3"}}, "observation.model"),
        (
            {"model": None, "reflection": {"model": ["openai/gpt-4o-mini", "hosted_vllm/x"]}},
            "reflection.model",
        ),
        (
            {
                "model": None,
                "observation": {"model": {"upTo": {"1000": "openai/gpt-4o-mini", "9000": "hosted_vllm/x"}}},
            },
            "observation.model",
        ),
    ],
    ids=["top-level", "ollama", "in-a-fallback-chain", "in-a-tier"],
)
def test_a_self_hosted_memory_model_is_refused_unless_the_operator_names_it(
    make_server: Any, vllm: Listener, overrides: dict[str, Any], field: str
) -> None:
    server = make_server()
    status, body = server.put_config("t1", overrides)
    assert status == 422, body
    assert body["error"]["field"] == f"overrides.{field}" and "self-hosted" in body["error"]["message"]
    assert make_server(memory_models="hosted_vllm/*,ollama/*,openai/*").put_config("t1", overrides)[0] == 200


def test_a_stored_self_hosted_model_reads_nothing_back(make_server: Any, vllm: Listener) -> None:
    """The read-back SSRF: the internal service's error body came back in the failed event."""
    server = make_server(**LOW_FLOORS)
    server.turn("t1", "hello")
    server.store_config(
        "t1", {"model": "hosted_vllm/x", "observation": {"messageTokens": 30, "bufferTokens": False}}
    )
    server.turn("t1", LONG)
    result = server.observe("t1")
    assert vllm.received == []
    assert "CONFIG_REFUSED" in json.dumps(result) and "answer from the loopback listener" not in json.dumps(
        result
    )


def test_the_memory_model_allow_list(make_server: Any) -> None:
    server = make_server(memory_models="openai/gpt-4o-mini,google/*")
    assert server.put_config("t1", {"model": "openai/gpt-4o-mini"})[0] == 200
    assert (
        server.put_config("t1", {"model": None, "observation": {"model": "google/gemini-2.5-flash"}})[0]
        == 200
    )
    assert server.put_config("t1", {"model": "om-local/extractive"})[0] == 200, "the operator's own model"
    status, body = server.put_config("t1", {"model": "anthropic/claude-opus-4"})
    assert status == 422 and body["error"]["field"] == "overrides.model", body
    assert "OM_MEMORY_MODELS" in body["error"]["message"]


# ------------------------------------------------------------------------------------ floors and caps


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"observation": {"messageTokens": 1, "bufferTokens": False}}, "observation.messageTokens"),
        ({"reflection": {"observationTokens": 1}}, "reflection.observationTokens"),
        ({"observation": {"maxTokensPerBatch": 1}}, "observation.maxTokensPerBatch"),
        ({"observation": {"messageTokens": 5000, "bufferTokens": 1}}, "observation.bufferTokens"),
        (
            {"observation": {"modelSettings": {"maxOutputTokens": 10**9}}},
            "observation.modelSettings.maxOutputTokens",
        ),
        (
            {"reflection": {"modelSettings": {"maxOutputTokens": 10**9}}},
            "reflection.modelSettings.maxOutputTokens",
        ),
    ],
    ids=[
        "messageTokens",
        "observationTokens",
        "maxTokensPerBatch",
        "bufferTokens",
        "obs-output",
        "refl-output",
    ],
)
def test_the_servers_bounds_apply_to_tenant_configs(
    make_server: Any, overrides: dict[str, Any], field: str
) -> None:
    """Defaults of a fresh server: a tenant cannot ask for a model call on nearly every turn, or an
    unbounded reply."""
    server = make_server()
    status, body = server.put_config("t1", overrides)
    assert status == 422, body
    assert body["error"]["field"] == f"overrides.{field}"
    assert "OM_MEMORY_" in body["error"]["message"]
    assert server.put_resource_config("r1", overrides)[0] == 422


def test_values_at_the_bounds_and_the_operators_own_values_pass(make_server: Any) -> None:
    server = make_server()
    at_bounds = {"observation": {"messageTokens": 1000, "bufferTokens": 200, "maxTokensPerBatch": 1000}}
    assert server.put_config("t1", at_bounds)[0] == 200
    assert server.put_config("t1", {"reflection": {"observationTokens": 1000}})[0] == 200
    operator = make_server(config=json.dumps({"observation": {"messageTokens": 40, "bufferTokens": False}}))
    status, body = operator.put_config("t1", {"observation": {"messageTokens": 40}, "temporalMarkers": True})
    assert status == 200, body


def test_a_stored_config_below_the_floor_calls_no_model(make_server: Any, listener: Listener) -> None:
    server = make_server(
        config=json.dumps(
            {
                "model": "openai/gpt-4o-mini",
                "observation": {"providerOptions": {"litellm": {"api_base": listener.url + "/v1"}}},
            }
        ),
        model_retry_max_retries=0,
    )
    server.turn("t1", "hello")
    server.store_config("t1", {"observation": {"messageTokens": 1, "bufferTokens": False}})
    server.turn("t1", LONG)
    result = server.observe("t1")
    assert listener.received == []
    assert "BELOW_SERVER_MINIMUM" in json.dumps(result), result


# ------------------------------------------------------------------------------------ the classification


def _options(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        yield path
        for member in typing.get_args(info.annotation) or (info.annotation,):
            if isinstance(member, type) and issubclass(member, BaseModel):
                yield from _options(member, f"{path}.")


def test_every_configuration_option_is_classified() -> None:
    """A new option fails here until `OPTION_RULES` says who may set it."""
    options = set(_options(om_config.ObservationalMemoryConfig))
    assert {"observation.providerOptions", "workingMemory.schema", "retrieval.vector"} <= options
    assert options - set(OPTION_RULES) == set(), "classify these in om_core.config.trust.OPTION_RULES"
    assert set(OPTION_RULES) - options == set(), "these are no longer options"


def test_the_operator_may_trust_its_tenants_with_the_passthrough(
    make_server: Any, listener: Listener
) -> None:
    """`OM_MEMORY_TENANT_PASSTHROUGH`: for a server whose every key holder is its operator."""
    server = make_server(**LOW_FLOORS, memory_tenant_passthrough=True)
    status, body = server.put_config(
        "t1", _attack(listener, "observation", {"litellm": {"api_base": "LISTENER"}})
    )
    assert status == 200, body
