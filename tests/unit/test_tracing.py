"""om's spans (`om_core.tracing`): off by default, and when on, named for what om does, with the model call
inside the operation it was made for, carrying the GenAI attributes and om's memory operation.

Real litellm calls to a loopback OpenAI-compatible server (`ModelServer`), priced by litellm's table, so
the cost on the span is litellm's; spans are read from the SDK's in-memory exporter (`tests.support.spans`).
"""

from __future__ import annotations

# Imported before litellm: the package pins litellm to its bundled price table (no download at import).
import om_core.models  # noqa: F401

# isort: split
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy import Engine

from om_adapters.telemetry import tracing_requested
from om_core import tracing
from om_core.config.options import ObservationalMemoryConfig
from om_core.engine import BufferObservation, MemoryEngine, new_cycle_id
from om_core.messages import text_message
from om_core.models.client import ModelCallFailed, ModelClient
from om_core.models.retry import RetryPolicy
from tests.support.model_server import ModelServer
from tests.support.spans import _memory_exporter, named, recording
from tests.support.workers import HoldingExecutor

PRICED_MODEL = "gpt-4o-mini"
KEY = {"OPENAI_API_KEY": "sk-fake-key-for-the-loopback-model"}


@pytest.fixture(scope="module")
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


def test_spans_are_off_by_default_and_cost_no_context_switch() -> None:
    exporter = _memory_exporter()  # an SDK provider is installed: only om's own switch keeps it quiet
    exporter.clear()
    assert not tracing.enabled()
    with tracing.operation("om.turn"), tracing.model_call("openai/x") as call:
        call.answered(model="openai/x", input_tokens=1, output_tokens=1, cost=0.1, finish_reason="stop")
        assert tracing.current_trace_id() is None
    assert exporter.get_finished_spans() == ()


def test_an_observation_holds_its_model_call_with_the_genai_attributes(
    sqlite_engine: Engine, server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in KEY.items():
        monkeypatch.setenv(name, value)
    config = ObservationalMemoryConfig.parse(server.thread_config(PRICED_MODEL))
    engine = MemoryEngine(sqlite_engine, models=ModelClient(), config=config, executor=HoldingExecutor())
    thread_id = f"traced-{uuid.uuid4().hex[:8]}"
    user = text_message("u1", "user", "My sister Maya moved to Lisbon in March; she teaches piano there.")
    reply = text_message("a1", "assistant", "Lisbon suits a piano teacher. Does Maya play concerts too?")
    with recording() as exporter:
        result = engine.ingest_turn(thread_id, None, [user, reply])
        pending = int(result.status["windows"]["active"]["messages"]["tokens"])
        engine.run_task(BufferObservation(thread_id, new_cycle_id("buffer-obs"), pending, skip_minimum=True))
    spans = exporter.get_finished_spans()

    (turn,) = named(spans, "om.turn")
    assert turn.attributes is not None and turn.attributes["om.messages"] == 2
    (observation,) = named(spans, "om.observation")
    assert observation.attributes is not None
    assert observation.attributes["om.task"] == "BufferObservation"
    (call,) = named(spans, f"chat openai/{PRICED_MODEL}")
    assert call.kind == SpanKind.CLIENT
    assert call.parent is not None and observation.context is not None
    assert call.parent.span_id == observation.context.span_id
    assert call.context is not None and call.context.trace_id == observation.context.trace_id
    attributes = dict(call.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == f"openai/{PRICED_MODEL}"
    assert attributes["om.memory.operation"] == "om.observation"
    assert int(attributes["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
    assert int(attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    assert float(attributes["om.cost_usd"]) > 0  # type: ignore[arg-type]


def test_a_failed_model_in_a_fallback_chain_leaves_a_failed_span_and_the_next_one_answers(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in KEY.items():
        monkeypatch.setenv(name, value)  # litellm reads the key from the environment
    failing = f"fails-{uuid.uuid4().hex[:8]}"
    server.script(failing, default="error500")
    client = ModelClient(RetryPolicy(max_retries=0), environ=KEY)
    options = {"litellm": {"api_base": server.api_base}}
    with recording() as exporter, tracing.operation("om.reflection"):
        client.complete(
            [f"openai/{failing}", f"openai/{PRICED_MODEL}"], system="s", user="u", provider_options=options
        )
    spans = exporter.get_finished_spans()
    (failed,) = named(spans, f"chat openai/{failing}")
    (answered,) = named(spans, f"chat openai/{PRICED_MODEL}")
    assert failed.status.status_code == StatusCode.ERROR
    assert answered.status.status_code != StatusCode.ERROR
    assert dict(answered.attributes or {})["om.memory.operation"] == "om.reflection"

    with recording() as exporter, pytest.raises(ModelCallFailed):
        client.complete(f"openai/{failing}", system="s", user="u", provider_options=options)
    (last,) = named(exporter.get_finished_spans(), f"chat openai/{failing}")
    assert last.status.status_code == StatusCode.ERROR


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_traces_are_asked_for_by_the_standard_variables_only(environ: dict[str, str], on: bool) -> None:
    assert tracing_requested(environ) is on


def test_the_cores_tracing_module_imports_the_api_only() -> None:
    """The import contract sees `opentelemetry` as one package; this reads which parts of it the one
    module allowed to import it takes: the API, never the SDK, an exporter or an instrumentation."""
    import ast
    from pathlib import Path

    source = Path(tracing.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
    otel = {name for name in imported if name.startswith("opentelemetry")}
    assert otel == {"opentelemetry", "opentelemetry.trace"}, otel


def test_every_task_kind_runs_in_a_span_named_for_what_it_does() -> None:
    """`run_task` names each task's span from this table; a new kind must be given its name."""
    from om_core.engine import TASKS
    from om_core.tracing import SPAN_OF_TASK

    named_spans = {"om.observation", "om.reflection", "om.extraction", "om.indexing", "om.webhook_delivery"}
    for kind in TASKS:
        assert SPAN_OF_TASK.get(kind.value.__name__) in named_spans, kind.value.__name__
    assert set(SPAN_OF_TASK.values()) == named_spans
