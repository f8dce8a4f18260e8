"""Model access: router-ID mapping, provider options, the retry layer (§5.9) and `ModelClient`.

Failures are injected at the litellm boundary (`litellm.completion` is replaced), which is where real
providers would produce them; nothing here touches the network.
"""

from __future__ import annotations

# Imported before litellm: the package pins litellm to its bundled price table (no download at import).
import om_core.models  # noqa: F401

# isort: split
import asyncio
import logging
import pickle
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import litellm
import pytest
from litellm import exceptions as llm_errors
from litellm.types.utils import Choices, Message, ModelResponse, Usage

from om_core.models.client import (
    Completion,
    ContextWindowExceeded,
    ModelClient,
    ModelCredentialsMissing,
    PartialCompletion,
)
from om_core.models.retry import OperationAborted, RetryPolicy, error_chain, is_abort, is_transient
from om_core.models.routing import (
    LOCAL_PROVIDER,
    RoutedModel,
    litellm_params_for,
    route,
    split_router_id,
    to_litellm_model,
)

KEYS = {
    "GEMINI_API_KEY": "k",
    "OPENAI_API_KEY": "k",
    "ANTHROPIC_API_KEY": "k",
    "DEEPSEEK_API_KEY": "k",
    "XAI_API_KEY": "k",
}

# --- routing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("router_id", "litellm_model", "provider", "model_id"),
    [
        ("google/gemini-2.5-flash", "gemini/gemini-2.5-flash", "google", "gemini-2.5-flash"),
        ("openai/gpt-5-mini", "openai/gpt-5-mini", "openai", "gpt-5-mini"),
        ("anthropic/claude-haiku-4-5", "anthropic/claude-haiku-4-5", "anthropic", "claude-haiku-4-5"),
        ("deepseek/deepseek-reasoner", "deepseek/deepseek-reasoner", "deepseek", "deepseek-reasoner"),
        ("deepseek/deepseek-v4-flash", "deepseek/deepseek-v4-flash", "deepseek", "deepseek-v4-flash"),
        ("xai/grok-4-1-fast", "xai/grok-4-1-fast", "xai", "grok-4-1-fast"),
        ("groq/llama-3.1-8b-instant", "groq/llama-3.1-8b-instant", "groq", "llama-3.1-8b-instant"),
        (
            "openrouter/mistralai/ministral-8b-2512",
            "openrouter/mistralai/ministral-8b-2512",
            "openrouter",
            "mistralai/ministral-8b-2512",
        ),
        ("om-local/extractive", "om-local/extractive", "om-local", "extractive"),
        ("azure/my-deployment", "azure/my-deployment", "azure", "my-deployment"),
        ("qwen3", "qwen3", None, "qwen3"),
    ],
)
def test_router_ids_map_to_litellm_names_and_keep_the_provider(
    router_id: str, litellm_model: str, provider: str | None, model_id: str
) -> None:
    routed = route(router_id)
    assert routed.litellm_model == litellm_model
    assert to_litellm_model(router_id) == litellm_model
    assert (routed.provider, routed.model_id) == (provider, model_id)
    assert split_router_id(router_id) == (provider, model_id)
    assert routed.router_id == router_id


def test_only_the_local_provider_is_local() -> None:
    assert route(f"{LOCAL_PROVIDER}/extractive").is_local
    assert not route("google/gemini-2.5-flash").is_local


def _everything_supported(_: RoutedModel) -> list[str] | None:
    return None


@pytest.mark.parametrize(
    ("router_id", "options", "expected"),
    [
        (
            "google/gemini-2.5-flash",
            {"google": {"thinkingConfig": {"thinkingBudget": 215}}},
            {"thinking": {"type": "enabled", "budget_tokens": 215}},
        ),
        (
            "google/gemini-2.5-flash",
            {"google": {"thinkingConfig": {"thinkingBudget": 0}}},
            {"thinking": {"type": "enabled", "budget_tokens": 0}},
        ),
        ("openai/gpt-5-mini", {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}, {}),
        (
            "openai/gpt-5-mini",
            {"openai": {"reasoningEffort": "low", "serviceTier": "flex"}},
            {"reasoning_effort": "low", "service_tier": "flex"},
        ),
        (
            "anthropic/claude-haiku-4-5",
            {"anthropic": {"thinking": {"type": "enabled", "budgetTokens": 2048}}},
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
        ),
        ("anthropic/claude-haiku-4-5", {"anthropic": {"thinking": {"type": "disabled"}}}, {}),
        (
            "deepseek/deepseek-reasoner",
            {"deepseek": {"reasoningEffort": "high"}},
            {"reasoning_effort": "high"},
        ),
        ("om-local/extractive", {"google": {"thinkingConfig": {"thinkingBudget": 215}}}, {}),
        ("openai/gpt-5-mini", {"litellm": {"seed": 7}}, {"seed": 7}),
    ],
)
def test_provider_options_translate_to_litellm_params(
    router_id: str, options: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert litellm_params_for(route(router_id), options, supported=_everything_supported) == expected


def test_google_thinking_budget_reaches_litellm_for_gemini() -> None:
    """With litellm's own capability table (not an injected one)."""
    params = litellm_params_for(
        route("google/gemini-2.5-flash"), {"google": {"thinkingConfig": {"thinkingBudget": 1024}}}
    )
    assert params == {"thinking": {"type": "enabled", "budget_tokens": 1024}}


def test_params_litellm_does_not_support_are_dropped_with_a_debug_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="om_core.models.routing")
    params = litellm_params_for(
        route("google/gemini-2.5-flash"),
        {"google": {"thinkingConfig": {"thinkingBudget": 5, "includeThoughts": True}, "safety": "x"}},
        supported=lambda _: ["temperature"],
    )
    assert params == {}
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "'thinking'" in messages
    assert "includeThoughts" in messages
    assert "safety" in messages


# --- retry classification ---------------------------------------------------------------------------------


class _StatusError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class _CodedError(Exception):
    def __init__(self, code: object, message: str = "stream failed") -> None:
        super().__init__(message)
        self.code = code


class _FlaggedError(Exception):
    def __init__(self, flag: bool) -> None:
        super().__init__("flagged")
        self.isRetryable = flag


def _caused_by(outer: Exception, inner: BaseException) -> Exception:
    outer.__cause__ = inner
    return outer


def _rate_limit() -> llm_errors.RateLimitError:
    return llm_errors.RateLimitError("slow down", llm_provider="openai", model="gpt-5-mini")


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (_rate_limit(), True),
        (llm_errors.Timeout("took too long", model="m", llm_provider="openai"), True),
        (llm_errors.APIConnectionError("connection dropped", llm_provider="openai", model="m"), True),
        (llm_errors.ServiceUnavailableError("overloaded", llm_provider="openai", model="m"), True),
        (llm_errors.InternalServerError("boom", llm_provider="openai", model="m"), True),
        (llm_errors.BadRequestError("bad schema", model="m", llm_provider="openai"), False),
        (llm_errors.AuthenticationError("bad key", llm_provider="openai", model="m"), False),
        (llm_errors.ContextWindowExceededError("too long", model="m", llm_provider="openai"), False),
        (_StatusError(408), True),
        (_StatusError(425), True),
        (_StatusError(429), True),
        (_StatusError(500), True),
        (_StatusError(503), True),
        (_StatusError(599), True),
        (_StatusError(400), False),
        (_StatusError(401), False),
        (_StatusError(404), False),
        (_StatusError(422), False),
        (_CodedError(503), True),
        (_CodedError(400), False),
        (_CodedError("UND_ERR_SOCKET"), True),
        (RuntimeError("socket hang up"), True),
        (RuntimeError("read ECONNRESET"), True),
        (RuntimeError("getaddrinfo EAI_AGAIN api.example.com"), True),
        (RuntimeError('stream finished with finishReason "other"'), True),
        (RuntimeError("Connection closed by peer"), True),
        (RuntimeError("invalid prompt"), False),
        (ConnectionResetError("reset"), True),
        (TimeoutError("slow"), True),
        (httpx.ReadTimeout("read timed out"), True),
        (_FlaggedError(True), True),
        (_FlaggedError(False), False),
        (_caused_by(RuntimeError("call failed"), _rate_limit()), True),
        (_caused_by(RuntimeError("call failed"), _caused_by(ValueError("x"), _StatusError(502))), True),
        (_caused_by(RuntimeError("call failed"), asyncio.CancelledError()), False),
        (_caused_by(_rate_limit(), OperationAborted()), False),
        (OperationAborted(), False),
        (PartialCompletion("openai/gpt-5-mini", "unknown"), True),
        (
            _caused_by(ModelCredentialsMissing("openai/gpt-5-mini", ["OPENAI_API_KEY"]), _StatusError(500)),
            False,
        ),
        (_caused_by(ContextWindowExceeded("openai/gpt-5-mini", "too long"), _StatusError(503)), False),
    ],
)
def test_transient_classification(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_a_user_abort_anywhere_in_the_chain_is_detected() -> None:
    error = _caused_by(RuntimeError("outer"), _caused_by(ValueError("middle"), KeyboardInterrupt()))
    assert is_abort(error)
    assert [type(link) for link in error_chain(error)] == [RuntimeError, ValueError, KeyboardInterrupt]


def test_the_error_chain_follows_context_and_error_attributes_without_looping() -> None:
    inner = _StatusError(503)
    holder = RuntimeError("wrapper")
    holder.error = inner  # type: ignore[attr-defined]
    try:
        try:
            raise holder
        except RuntimeError as exc:
            raise ValueError("while handling") from exc
    except ValueError as outer:
        outer.__context__ = outer.__cause__  # a cycle-free but doubly linked chain
        chain = list(error_chain(outer))
    assert chain[0].args == ("while handling",)
    assert holder in chain and inner in chain
    assert len(chain) == len({id(link) for link in chain})


# --- retry schedule -----------------------------------------------------------------------------------------


class _Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def _always(error: Exception) -> Callable[[], None]:
    def fail() -> None:
        raise error

    return fail


def test_schedule_is_exponential_and_capped_at_120_seconds_without_jitter() -> None:
    sleeps = _Sleeps()
    policy = RetryPolicy(sleep=sleeps, rng=lambda: 0.5)
    with pytest.raises(llm_errors.RateLimitError) as caught:
        policy.run(_always(_rate_limit()))
    assert sleeps.delays == [1, 2, 4, 8, 16, 32, 64, 120]
    assert "gave up after 9 attempts" in caught.value.__notes__[-1]


@pytest.mark.parametrize(("draw", "factor"), [(0.0, 0.8), (1.0, 1.2), (0.25, 0.9)])
def test_jitter_scales_each_delay_within_twenty_percent(draw: float, factor: float) -> None:
    policy = RetryPolicy(rng=lambda: draw)
    for retry_index, nominal in enumerate([1, 2, 4, 8, 16, 32, 64, 120]):
        assert policy.delay(retry_index) == pytest.approx(nominal * factor)


def test_random_jitter_stays_within_bounds() -> None:
    sleeps = _Sleeps()
    with pytest.raises(llm_errors.RateLimitError):
        RetryPolicy(sleep=sleeps).run(_always(_rate_limit()))
    nominal = [1, 2, 4, 8, 16, 32, 64, 120]
    assert len(sleeps.delays) == 8
    for delay, expected in zip(sleeps.delays, nominal, strict=True):
        assert expected * 0.8 <= delay <= expected * 1.2


def test_at_most_eight_retries_then_the_last_error_is_raised() -> None:
    calls = 0

    def fail() -> None:
        nonlocal calls
        calls += 1
        raise _StatusError(503)

    with pytest.raises(_StatusError):
        RetryPolicy(sleep=_Sleeps()).run(fail)
    assert calls == 9


def test_permanent_errors_are_not_retried() -> None:
    sleeps = _Sleeps()
    with pytest.raises(_StatusError):
        RetryPolicy(sleep=sleeps).run(_always(_StatusError(400)))
    assert sleeps.delays == []


def test_success_after_transient_failures_returns_the_value() -> None:
    outcomes: Iterator[Exception | str] = iter([_rate_limit(), _StatusError(502), "ok"])
    sleeps = _Sleeps()
    retries: list[int] = []

    def flaky() -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    result = RetryPolicy(sleep=sleeps, rng=lambda: 0.5).run(flaky, on_retry=lambda i, e, d: retries.append(i))
    assert result == "ok"
    assert sleeps.delays == [1, 2]
    assert retries == [0, 1]


def test_abort_during_the_wait_stops_retrying() -> None:
    abort = threading.Event()
    calls = 0

    def fail() -> None:
        nonlocal calls
        calls += 1
        raise _rate_limit()

    with pytest.raises(OperationAborted):
        RetryPolicy(sleep=lambda _: abort.set()).run(fail, abort=abort)
    assert calls == 1


def test_an_already_aborted_operation_never_calls() -> None:
    abort = threading.Event()
    abort.set()
    with pytest.raises(OperationAborted):
        RetryPolicy().run(lambda: pytest.fail("must not be called"), abort=abort)


def test_a_real_wait_ends_as_soon_as_abort_is_set() -> None:
    abort = threading.Event()
    threading.Timer(0.05, abort.set).start()
    with pytest.raises(OperationAborted):
        RetryPolicy(base_delay_s=30).run(_always(_rate_limit()), abort=abort)


def test_invalid_policies_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)


# --- ModelClient -------------------------------------------------------------------------------------------


def _response(
    text: str = "<observations>\n* 🔴 (10:00) fact\n</observations>",
    *,
    finish_reason: str | None = "stop",
    prompt_tokens: int = 1200,
    completion_tokens: int = 300,
    model: str = "gpt-5-mini",
) -> ModelResponse:
    response = ModelResponse(
        model=model,
        choices=[Choices(finish_reason="stop", index=0, message=Message(content=text, role="assistant"))],
    )
    # Set after construction: litellm's constructor normalises provider spellings (Gemini "OTHER" becomes
    # "content_filter", unknown values "stop"); a provider passthrough can still deliver raw values.
    response.choices[0].finish_reason = finish_reason  # type: ignore[assignment]
    response.usage = Usage(  # type: ignore[attr-defined]
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )
    return response


class _FakeLitellm:
    """Replays a script of outcomes (an exception to raise or a response to return) per model name."""

    def __init__(self, script: dict[str, list[Exception | ModelResponse]]) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> ModelResponse:
        self.calls.append(kwargs)
        outcomes = self.script[kwargs["model"]]
        outcome = outcomes.pop(0) if len(outcomes) > 1 else outcomes[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def models(self) -> list[str]:
        return [call["model"] for call in self.calls]


@pytest.fixture
def sleeps() -> _Sleeps:
    return _Sleeps()


@pytest.fixture
def client(sleeps: _Sleeps) -> ModelClient:
    return ModelClient(RetryPolicy(sleep=sleeps, rng=lambda: 0.5), environ=KEYS)


def _install(
    monkeypatch: pytest.MonkeyPatch, script: dict[str, list[Exception | ModelResponse]]
) -> _FakeLitellm:
    fake = _FakeLitellm(script)
    monkeypatch.setattr(litellm, "completion", fake)
    return fake


def test_rate_limits_are_retried_by_our_policy_only(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient, sleeps: _Sleeps
) -> None:
    fake = _install(monkeypatch, {"openai/gpt-5-mini": [_rate_limit(), _rate_limit(), _response("done")]})
    completion = client.complete("openai/gpt-5-mini", system="sys", user="hello", temperature=0.3)
    assert completion.text == "done"
    assert completion.attempts == 3
    assert sleeps.delays == [1, 2]
    for call in fake.calls:
        assert call["num_retries"] == 0
        assert call["max_retries"] == 0
    assert fake.calls[0]["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hello"},
    ]


def test_settings_and_provider_options_are_passed_through(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient
) -> None:
    fake = _install(monkeypatch, {"gemini/gemini-2.5-flash": [_response(model="gemini-2.5-flash")]})
    client.complete(
        "google/gemini-2.5-flash",
        system="s",
        user="u",
        temperature=0.0,
        max_output_tokens=100_000,
        provider_options={"google": {"thinkingConfig": {"thinkingBudget": 1024}}},
        timeout_s=30,
    )
    call = fake.calls[0]
    assert call["model"] == "gemini/gemini-2.5-flash"
    assert call["temperature"] == 0.0
    assert call["max_tokens"] == 100_000
    assert call["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert call["timeout"] == 30


def test_unset_settings_are_not_sent(monkeypatch: pytest.MonkeyPatch, client: ModelClient) -> None:
    fake = _install(monkeypatch, {"openai/gpt-5-mini": [_response()]})
    client.complete("openai/gpt-5-mini", system="", user=[{"type": "text", "text": "hi"}])
    call = fake.calls[0]
    assert "temperature" not in call and "max_tokens" not in call
    assert call["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_usage_and_cost_come_from_litellm(monkeypatch: pytest.MonkeyPatch, client: ModelClient) -> None:
    response = _response(prompt_tokens=1200, completion_tokens=300)
    expected_cost = litellm.completion_cost(completion_response=response)
    _install(monkeypatch, {"openai/gpt-5-mini": [response]})
    completion = client.complete("openai/gpt-5-mini", system="s", user="u")
    assert (completion.input_tokens, completion.output_tokens, completion.total_tokens) == (1200, 300, 1500)
    assert expected_cost > 0
    assert completion.cost == pytest.approx(expected_cost)
    assert completion.finish_reason == "stop"
    assert completion.model == "openai/gpt-5-mini"


def test_cost_recorded_by_litellm_is_used_and_unknown_cost_is_none(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient
) -> None:
    priced = _response()
    priced._hidden_params["response_cost"] = 0.0125
    unpriced = _response(model="no-such-model-anywhere")
    _install(monkeypatch, {"openai/gpt-5-mini": [priced], "openai/mystery": [unpriced]})
    assert client.complete("openai/gpt-5-mini", system="s", user="u").cost == 0.0125
    assert client.complete("openai/mystery", system="s", user="u").cost is None


def test_completion_is_frozen() -> None:
    completion = Completion("t", 1, 2, 3, None, "m", "stop", 1)
    with pytest.raises(AttributeError):
        completion.text = "changed"  # type: ignore[misc]


def test_context_window_errors_are_never_retried(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient, sleeps: _Sleeps
) -> None:
    too_long = llm_errors.ContextWindowExceededError(
        "prompt is too long", model="gpt-5-mini", llm_provider="openai"
    )
    fake = _install(monkeypatch, {"openai/gpt-5-mini": [too_long]})
    with pytest.raises(ContextWindowExceeded) as caught:
        client.complete("openai/gpt-5-mini", system="s", user="u")
    assert len(fake.calls) == 1
    assert sleeps.delays == []
    assert caught.value.code == "MODEL_CONTEXT_WINDOW_EXCEEDED"
    assert caught.value.model == "openai/gpt-5-mini"


def test_a_fallback_chain_moves_to_the_next_model_on_a_permanent_failure(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient, sleeps: _Sleeps
) -> None:
    bad = llm_errors.BadRequestError("unsupported parameter", model="grok", llm_provider="xai")
    fake = _install(
        monkeypatch, {"xai/grok-4-1-fast": [bad], "gemini/gemini-2.5-flash": [_response("fallback")]}
    )
    completion = client.complete(["xai/grok-4-1-fast", "google/gemini-2.5-flash"], system="s", user="u")
    assert completion.text == "fallback"
    assert completion.model == "google/gemini-2.5-flash"
    assert completion.attempts == 2
    assert fake.models() == ["xai/grok-4-1-fast", "gemini/gemini-2.5-flash"]
    assert sleeps.delays == []


def test_a_fallback_chain_moves_on_once_retries_are_exhausted(
    monkeypatch: pytest.MonkeyPatch, sleeps: _Sleeps
) -> None:
    client = ModelClient(RetryPolicy(max_retries=2, sleep=sleeps, rng=lambda: 0.5), environ=KEYS)
    fake = _install(
        monkeypatch,
        {"openai/gpt-5-mini": [_rate_limit()], "anthropic/claude-haiku-4-5": [_response("second")]},
    )
    completion = client.complete(["openai/gpt-5-mini", "anthropic/claude-haiku-4-5"], system="s", user="u")
    assert completion.text == "second"
    assert completion.attempts == 4
    assert fake.models() == ["openai/gpt-5-mini"] * 3 + ["anthropic/claude-haiku-4-5"]


def test_a_context_window_failure_falls_back_to_a_larger_model(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient
) -> None:
    too_long = llm_errors.ContextWindowExceededError("too long", model="x", llm_provider="groq")
    _install(monkeypatch, {"groq/small": [too_long], "gemini/gemini-2.5-flash": [_response("big")]})
    assert client.complete(["groq/small", "google/gemini-2.5-flash"], system="s", user="u").text == "big"


def test_when_every_model_fails_the_last_error_is_raised_with_the_others_noted(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient
) -> None:
    first = llm_errors.BadRequestError("first broke", model="a", llm_provider="openai")
    too_long = llm_errors.ContextWindowExceededError("too long", model="b", llm_provider="deepseek")
    _install(monkeypatch, {"openai/gpt-5-mini": [first], "deepseek/deepseek-reasoner": [too_long]})
    with pytest.raises(ContextWindowExceeded) as caught:
        client.complete(["openai/gpt-5-mini", "deepseek/deepseek-reasoner"], system="s", user="u")
    assert any("openai/gpt-5-mini" in note and "first broke" in note for note in caught.value.__notes__)


def test_a_missing_key_fails_fast_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, sleeps: _Sleeps
) -> None:
    fake = _install(monkeypatch, {"gemini/gemini-2.5-flash": [_response()]})
    client = ModelClient(RetryPolicy(sleep=sleeps), environ={})
    with pytest.raises(ModelCredentialsMissing) as caught:
        client.complete("google/gemini-2.5-flash", system="s", user="u")
    assert "GEMINI_API_KEY" in str(caught.value)
    assert caught.value.code == "MODEL_CREDENTIALS_MISSING"
    assert fake.calls == []
    assert sleeps.delays == []


@pytest.mark.parametrize(
    ("router_id", "error", "variable"),
    [
        (
            "anthropic/claude-haiku-4-5",
            llm_errors.AuthenticationError("invalid x-api-key", llm_provider="anthropic", model="claude"),
            "ANTHROPIC_API_KEY",
        ),
        (
            "openai/gpt-5-mini",
            llm_errors.InternalServerError(
                "OpenAIException - Missing credentials. Please pass an `api_key`",
                llm_provider="openai",
                model="m",
            ),
            "OPENAI_API_KEY",
        ),
        (
            "google/gemini-2.5-flash",
            llm_errors.APIConnectionError("Missing Gemini API key.", llm_provider="gemini", model="m"),
            "GEMINI_API_KEY",
        ),
    ],
)
def test_auth_failures_from_litellm_become_credentials_errors_and_are_not_retried(
    monkeypatch: pytest.MonkeyPatch,
    client: ModelClient,
    sleeps: _Sleeps,
    router_id: str,
    error: Exception,
    variable: str,
) -> None:
    fake = _install(monkeypatch, {route(router_id).litellm_model: [error]})
    with pytest.raises(ModelCredentialsMissing) as caught:
        client.complete(router_id, system="s", user="u")
    assert variable in str(caught.value)
    assert len(fake.calls) == 1
    assert sleeps.delays == []


def test_the_key_check_can_be_skipped_when_keys_come_from_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, {"openai/gpt-5-mini": [_response("ok")]})
    client = ModelClient(environ={}, check_credentials=False)
    assert client.complete("openai/gpt-5-mini", system="s", user="u").text == "ok"


@pytest.mark.parametrize("reason", ["other", "unknown", "content_filter"])
def test_a_partial_reply_is_retried(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient, sleeps: _Sleeps, reason: str
) -> None:
    _install(
        monkeypatch, {"openai/gpt-5-mini": [_response("half", finish_reason=reason), _response("whole")]}
    )
    completion = client.complete("openai/gpt-5-mini", system="s", user="u")
    assert completion.text == "whole"
    assert completion.attempts == 2
    assert sleeps.delays == [1]


@pytest.mark.parametrize("reason", ["stop", "length", "end_turn", None])
def test_normal_finish_reasons_are_accepted(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient, reason: str | None
) -> None:
    _install(monkeypatch, {"openai/gpt-5-mini": [_response("x", finish_reason=reason)]})
    completion = client.complete("openai/gpt-5-mini", system="s", user="u")
    assert completion.attempts == 1
    assert completion.finish_reason == reason


def test_a_reply_that_stays_partial_fails_after_the_retries(
    monkeypatch: pytest.MonkeyPatch, sleeps: _Sleeps
) -> None:
    _install(monkeypatch, {"openai/gpt-5-mini": [_response("half", finish_reason="other")]})
    client = ModelClient(RetryPolicy(max_retries=3, sleep=sleeps), environ=KEYS)
    with pytest.raises(PartialCompletion, match='finishReason "other"'):
        client.complete("openai/gpt-5-mini", system="s", user="u")
    assert len(sleeps.delays) == 3


def test_an_abort_is_not_turned_into_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    abort = threading.Event()
    fake = _install(
        monkeypatch, {"openai/gpt-5-mini": [_rate_limit()], "gemini/gemini-2.5-flash": [_response()]}
    )
    client = ModelClient(RetryPolicy(sleep=lambda _: abort.set()), environ=KEYS)
    with pytest.raises(OperationAborted):
        client.complete(["openai/gpt-5-mini", "google/gemini-2.5-flash"], system="s", user="u", abort=abort)
    assert fake.models() == ["openai/gpt-5-mini"]


def test_an_empty_chain_is_rejected(client: ModelClient) -> None:
    with pytest.raises(ValueError, match="at least one model"):
        client.complete([], system="s", user="u")


@pytest.mark.parametrize(
    "error",
    [
        ContextWindowExceeded("openai/gpt-5-mini", "too long"),
        ModelCredentialsMissing("google/gemini-2.5-flash", ["GEMINI_API_KEY", "GOOGLE_API_KEY"], "detail"),
        PartialCompletion("openai/gpt-5-mini", "other"),
        OperationAborted(),
    ],
)
def test_errors_survive_pickling_for_celery(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert str(copy) == str(error)
    assert copy.code == error.code  # type: ignore[attr-defined]


def test_the_local_model_needs_no_key_and_costs_nothing() -> None:
    client = ModelClient(environ={})
    user = "## New Message History to Observe\n\nDec 4 2025:\nUser (2:30 PM): My sister Maya lives in Lisbon."
    completion = client.complete("om-local/extractive", system="", user=user, temperature=0.3)
    assert "Maya" in completion.text and "Lisbon" in completion.text
    assert completion.cost == 0.0
    assert completion.input_tokens > 0 and completion.output_tokens > 0
    assert completion.total_tokens == completion.input_tokens + completion.output_tokens
    assert completion.model == "om-local/extractive"


def test_gemini_other_finish_reason_as_litellm_reports_it_is_retried(
    monkeypatch: pytest.MonkeyPatch, client: ModelClient
) -> None:
    """litellm turns Gemini's "OTHER" into "content_filter"; that is still a partial reply for us."""
    partial = ModelResponse(
        model="gemini-2.5-flash",
        choices=[Choices(finish_reason="OTHER", index=0, message=Message(content="cut", role="assistant"))],
    )
    assert partial.choices[0].finish_reason == "content_filter"
    _install(monkeypatch, {"gemini/gemini-2.5-flash": [partial, _response("complete")]})
    assert client.complete("google/gemini-2.5-flash", system="s", user="u").text == "complete"
