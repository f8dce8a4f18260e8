"""om's model calls skip litellm's success logging, and still record litellm's usage and cost.

After a successful call litellm queues `Logging.success_handler` on its logging executor, which builds the
standard logging payload for callbacks om never registers; `om_core.models.client._unlogged` switches it
off for om's calls (its docstring says how and why). These tests make real litellm calls: an Observer call
from the engine and a plain completion to a loopback OpenAI-compatible server (`ModelServer`, through
litellm, the OpenAI SDK and httpx), and an embedding of the offline local model. They count what litellm
hands its logging executor and how often its success handler runs. Each has its positive control: the
same call made with litellm directly queues the success logging, so a spy that stopped seeing it fails
the test instead of passing it.
"""

from __future__ import annotations

# Imported before litellm: the package pins litellm to its bundled price table (no download at import).
import om_core.models  # noqa: F401

# isort: split
import functools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import litellm
import litellm.utils as litellm_utils
import pytest
from litellm import exceptions as llm_errors
from litellm.litellm_core_utils.litellm_logging import Logging
from sqlalchemy import Engine

from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import BufferObservation, MemoryEngine, new_cycle_id
from om_core.engine import events as ev
from om_core.messages import text_message
from om_core.models.client import ModelCallFailed, ModelClient
from om_core.models.retry import RetryPolicy
from om_core.store.outbox import list_events
from tests.support.model_server import ModelServer
from tests.support.workers import HoldingExecutor, wait_until

#: A model litellm has a non-zero price for: the cost om records must be litellm's price of the usage.
PRICED_MODEL = "gpt-4o-mini"
KEY = {"OPENAI_API_KEY": "sk-fake-key-for-the-loopback-model"}


class LoggingSpy:
    """What litellm hands its logging executor (by the name of the function queued) and how many times
    its success handler has run, in any thread."""

    def __init__(self) -> None:
        self.queued: list[str] = []
        self._ran = 0
        self._guard = threading.Lock()

    def queue(self, fn: Any, args: tuple[Any, ...]) -> None:
        # The sync wrapper queues `ctx.run(success_handler, ...)`: the logging function is the first argument.
        target = args[0] if args and callable(args[0]) else fn
        self.queued.append(getattr(target, "__name__", repr(target)))

    def ran(self) -> None:
        with self._guard:
            self._ran += 1

    @property
    def runs(self) -> int:
        with self._guard:
            return self._ran


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> LoggingSpy:
    spy = LoggingSpy()
    executor = litellm_utils.executor
    submit = executor.submit

    def counting_submit(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        spy.queue(fn, args)
        return submit(fn, *args, **kwargs)

    success_handler = Logging.success_handler

    @functools.wraps(success_handler)
    def counting_success_handler(self: Logging, *args: Any, **kwargs: Any) -> Any:
        spy.ran()
        return success_handler(self, *args, **kwargs)

    monkeypatch.setattr(executor, "submit", counting_submit)
    monkeypatch.setattr(Logging, "success_handler", counting_success_handler)
    return spy


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm reads the key from the environment; the loopback server accepts any."""
    for name, value in KEY.items():
        monkeypatch.setenv(name, value)


def _plain_litellm_call(server: ModelServer, **kwargs: Any) -> Any:
    """The positive control: a call made with litellm directly, as om made it before `_unlogged`."""
    return litellm.completion(
        model=f"openai/{PRICED_MODEL}",
        api_base=server.api_base,
        num_retries=0,
        max_retries=0,
        **kwargs,
    )


def _assert_a_plain_call_is_logged(spy: LoggingSpy, server: ModelServer, **kwargs: Any) -> Any:
    queued_before = len(spy.queued)
    response = _plain_litellm_call(server, **kwargs)
    assert spy.queued[queued_before:] == ["success_handler"], "the spy no longer sees litellm's logging"
    wait_until(lambda: spy.runs >= 1 or None, deadline_s=30, what="litellm's success handler to run")
    return response


@pytest.mark.usefixtures("keyed")
def test_an_observer_call_queues_no_success_logging_and_records_litellms_cost(
    sqlite_engine: Engine, server: ModelServer, spy: LoggingSpy
) -> None:
    config = ObservationalMemoryConfig.parse(server.thread_config(PRICED_MODEL))
    engine = MemoryEngine(sqlite_engine, models=ModelClient(), config=config, executor=HoldingExecutor())
    thread_id = f"logging-{uuid.uuid4().hex[:8]}"
    user = text_message("u1", "user", "My sister Maya moved to Lisbon in March; she teaches piano there.")
    reply = text_message("a1", "assistant", "Lisbon suits a piano teacher. Does Maya play concerts too?")
    result = engine.ingest_turn(thread_id, None, [user, reply])
    pending = int(result.status["windows"]["active"]["messages"]["tokens"])
    calls_before = len(server.calls(PRICED_MODEL))

    engine.run_task(BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending, skip_minimum=True))

    assert [call.kind for call in server.calls(PRICED_MODEL)[calls_before:]] == ["observer"]
    (end,) = list_events(sqlite_engine, thread_id=thread_id, types=[ev.BUFFERING_END])
    usage, cost = end.payload["usage"], end.payload["cost"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    prompt_cost, completion_cost = litellm.cost_per_token(
        model=PRICED_MODEL, prompt_tokens=usage["inputTokens"], completion_tokens=usage["outputTokens"]
    )
    assert cost is not None and cost > 0
    assert cost == pytest.approx(prompt_cost + completion_cost)
    assert spy.queued == [], "an om model call queued litellm's success logging"
    assert spy.runs == 0

    _assert_a_plain_call_is_logged(spy, server, messages=[{"role": "user", "content": "hello"}])
    assert spy.runs == 1, "only the plain litellm call was logged"


@pytest.mark.usefixtures("keyed")
def test_a_completion_records_the_usage_and_cost_litellm_reports_for_the_same_reply(
    server: ModelServer, spy: LoggingSpy
) -> None:
    """The loopback model answers the same prompt with the same reply and usage, so om's completion and a
    plain litellm call must agree on the tokens and on the cost litellm put on the response."""
    client = ModelClient(environ=KEY)
    system, user = "Summarise the facts.", "Maya moved to Lisbon in March and teaches piano there."
    options = {"litellm": {"api_base": server.api_base}}

    completion = client.complete(f"openai/{PRICED_MODEL}", system=system, user=user, provider_options=options)
    assert spy.queued == [] and spy.runs == 0

    plain = _assert_a_plain_call_is_logged(
        spy, server, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}]
    )
    assert (completion.input_tokens, completion.output_tokens) == (
        plain.usage.prompt_tokens,
        plain.usage.completion_tokens,
    )
    assert completion.cost is not None and completion.cost > 0
    assert completion.cost == pytest.approx(plain._hidden_params["response_cost"])
    assert completion.text == plain.choices[0].message.content


@pytest.mark.usefixtures("keyed")
def test_a_provider_error_still_maps_to_the_same_public_failure(server: ModelServer, spy: LoggingSpy) -> None:
    """litellm's error mapping runs before its logging: a 500 is still `ModelCallFailed` with the status."""
    namespace = f"fails-{uuid.uuid4().hex[:8]}"
    server.script(namespace, default="error500")
    client = ModelClient(RetryPolicy(max_retries=0), environ=KEY)
    with pytest.raises(ModelCallFailed) as failed:
        client.complete(
            f"openai/{namespace}",
            system="s",
            user="u",
            provider_options={"litellm": {"api_base": server.api_base}},
        )
    assert failed.value.status == 500
    assert isinstance(failed.value.__cause__, llm_errors.InternalServerError)
    assert spy.queued == []


def test_an_embedding_queues_no_success_logging(spy: LoggingSpy) -> None:
    vectors = ModelClient(environ={}).embed("om-local/hashing-embedding", ["Maya lives in Lisbon", "piano"])
    assert len(vectors) == 2 and all(vectors)
    assert spy.queued == []

    litellm.embedding(model="om-local/hashing-embedding", input=["positive control"])
    assert spy.queued == ["success_handler"], "the spy no longer sees litellm's logging"
