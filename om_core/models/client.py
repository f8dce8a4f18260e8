"""One Observer/Reflector/extraction call through litellm, with retries and fallbacks.

Everything the engine needs from a model is a text reply plus what it cost, so the client hides litellm
behind `ModelClient.complete` and turns litellm's many failure shapes into the few the engine acts on:

- `ContextWindowExceeded`: the input is too big for the model; never retried, the engine splits input;
- `ModelCredentialsMissing`: no API key; never retried, the message names the variable to set;
- everything else is retried by `RetryPolicy` when transient (§5.9), then the next model of a fallback
  chain is tried (§11.2), and finally the last error is raised: unchanged when om raised it (an
  `OMError`), else as `ModelCallFailed`, which names the model, the error class and the HTTP status and
  chains the original (`__cause__`). The provider's own text (its error body, the URL it called) is logged
  here and never put in a message: messages reach tenants (failed events, extraction failures, turn
  answers), and a provider's error body is not theirs to read (`om_core.errors.public_text`).

A reply whose finish reason is not a normal stop (e.g. "other"/"unknown") is a truncated stream and is
raised as a retryable `PartialCompletion` (§5.1). litellm's own retries are switched off: exactly one
retry layer exists. So is litellm's success logging (`_unlogged`): om reads a reply's usage and cost from
the response itself and reports them in its own events.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from om_core import tracing
from om_core.errors import OMError, http_status
from om_core.models.capabilities import accepts_images
from om_core.models.retry import RetryPolicy, is_abort
from om_core.models.routing import RoutedModel, litellm_params_for, route
from om_core.models.selection import ModelWithRetries

__all__ = [
    "NORMAL_FINISH_REASONS",
    "Completion",
    "ContextWindowExceeded",
    "ModelCallFailed",
    "ModelClient",
    "ModelCredentialsMissing",
    "PartialCompletion",
    "UserContent",
]

log = logging.getLogger(__name__)

#: Finish reasons of a complete reply (OpenAI's names plus provider spellings litellm may pass through).
NORMAL_FINISH_REASONS = frozenset(
    {"stop", "length", "end_turn", "stop_sequence", "max_tokens", "eos", "complete", "completed"}
)
_CREDENTIAL_HINT = re.compile(
    r"missing[^.]{0,60}(api[ _-]?key|credentials)|api[_ ]key client option must be set|no api[ _-]?key"
    r"|(invalid|incorrect) api[ _-]?key|api key not (valid|found|set)",
    re.IGNORECASE,
)

#: The user message: plain text, or OpenAI-style content parts when attachments travel with it.
UserContent = str | Sequence[Mapping[str, Any]]


class ContextWindowExceeded(OMError):
    """The prompt does not fit the model's context window. Retrying cannot help; split the input.
    `detail` is the provider's words, kept for the server's log and out of the message."""

    is_retryable = False

    def __init__(self, model: str, detail: str) -> None:
        self.model = model
        self.detail = detail
        super().__init__("MODEL_CONTEXT_WINDOW_EXCEEDED", f"{model}: input exceeds the context window")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ContextWindowExceeded, (self.model, self.detail))


class ModelCredentialsMissing(OMError):
    """No usable API key for the model's provider. `detail` is the provider's words (logged, never in the
    message)."""

    is_retryable = False

    def __init__(self, model: str, env_vars: Sequence[str], detail: str = "") -> None:
        self.model = model
        self.env_vars = tuple(env_vars)
        if self.env_vars:
            first, *others = self.env_vars
            alternatives = f" (or {', '.join(others)})" if others else ""
            hint = f"set the environment variable {first}{alternatives}"
        else:
            hint = "set the API key environment variable litellm expects for this provider"
        super().__init__("MODEL_CREDENTIALS_MISSING", f"no API key for model {model}: {hint}")
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        return (ModelCredentialsMissing, (self.model, self.env_vars, self.detail))


class PartialCompletion(OMError):
    """The reply ended without a normal finish reason: treated as a transient transport error."""

    is_retryable = True

    def __init__(self, model: str, finish_reason: str) -> None:
        self.model = model
        self.finish_reason = finish_reason
        # The provider chose the reason: a short word, shown cut to one (the message reaches tenants).
        super().__init__(
            "MODEL_PARTIAL_COMPLETION",
            f'{model} finished with finishReason "{finish_reason[:40]}" (partial reply)',
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartialCompletion, (self.model, self.finish_reason))


class ModelCallFailed(OMError):
    """A model call failed for a reason om did not raise itself (the provider answered an error, the
    connection failed, litellm refused): its public form. The message names the model, the error's class
    and the HTTP status, nothing the provider wrote; the original is the `__cause__` and its full text is
    in the server's log."""

    is_retryable = False

    def __init__(self, model: str, error_type: str, status: int | None = None) -> None:
        self.model = model
        self.error_type = error_type
        self.status = status
        shown = f"{error_type} (HTTP {status})" if status is not None else error_type
        super().__init__(
            "MODEL_CALL_FAILED",
            f"model {model} failed: {shown}; the provider's message is in the server's log",
        )

    @classmethod
    def of(cls, model: str, error: BaseException) -> ModelCallFailed:
        """The public form of `error`, after logging its full text (with any fallback notes) on the server."""
        notes = "; ".join(getattr(error, "__notes__", ()))
        log.warning(
            "model %s failed: %s: %s%s", model, type(error).__name__, error, f" ({notes})" if notes else ""
        )
        return cls(model, type(error).__name__, http_status(error))

    def __reduce__(self) -> tuple[Any, ...]:
        return (ModelCallFailed, (self.model, self.error_type, self.status))


@dataclass(frozen=True)
class Completion:
    """A successful reply. `model` is the router ID that answered; `attempts` counts every litellm call
    made for this request, including failed ones on earlier models of a fallback chain."""

    text: str
    input_tokens: int
    output_tokens: int
    total_tokens: int
    cost: float | None
    model: str
    finish_reason: str | None
    attempts: int


class ModelClient:
    """Calls models by router ID (or fallback chain) with one retry policy.

    `environ` is where API keys are looked up before calling (defaults to `os.environ`); a provider in the
    routing table with none of its key variables set fails fast with `ModelCredentialsMissing` instead of
    spending nine attempts on a 500. `check_credentials=False` skips that pre-check (keys supplied some
    other way).
    """

    def __init__(
        self,
        retry: RetryPolicy | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        check_credentials: bool = True,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._environ = environ
        self.check_credentials = check_credentials

    def complete(
        self,
        model: str | Sequence[str | ModelWithRetries],
        *,
        system: str,
        user: UserContent,
        temperature: float | None = None,
        max_output_tokens: int | None = None,
        provider_options: Mapping[str, Any] | None = None,
        timeout_s: float = 120,
        response_format: Mapping[str, Any] | None = None,
        abort: threading.Event | None = None,
    ) -> Completion:
        """One completion; a sequence of models is an ordered fallback chain (first = primary). An entry
        with its own `max_retries` (`ModelWithRetries`) is retried that many times at most, by this
        client's backoff; the others follow this client's policy."""
        chain = [model] if isinstance(model, str) else list(model)
        if not chain:
            raise ValueError("complete() needs at least one model")
        messages = _messages(system, user)
        attempts = 0
        failures: list[tuple[str, Exception]] = []
        for position, entry in enumerate(chain):
            router_id, retry = self._entry_policy(entry)
            routed = route(router_id)

            def attempt(routed: RoutedModel = routed) -> Any:
                nonlocal attempts
                attempts += 1
                self.before_attempt(routed.router_id)
                return self._call_once(
                    routed,
                    messages,
                    temperature=temperature,
                    max_output_tokens=max_output_tokens,
                    provider_options=provider_options,
                    timeout_s=timeout_s,
                    response_format=response_format,
                )

            with tracing.model_call(routed.router_id) as call:
                try:
                    self._check_credentials(routed)
                    response = retry.run(attempt, abort=abort)
                except Exception as exc:
                    if is_abort(exc):
                        raise
                    failures.append((routed.router_id, exc))
                    if position + 1 < len(chain):
                        call.failed(exc)
                        log.warning(
                            "model %s failed (%s); falling back to %s",
                            router_id,
                            exc,
                            self._entry_policy(chain[position + 1])[0],
                        )
                        continue
                    for earlier_model, earlier in failures[:-1]:
                        exc.add_note(
                            f"fallback {earlier_model} failed earlier: {type(earlier).__name__}: {earlier}"
                        )
                    if isinstance(exc, OMError):
                        raise
                    raise ModelCallFailed.of(routed.router_id, exc) from exc
                completion = _completion(response, routed.router_id, attempts)
                call.answered(
                    model=completion.model,
                    input_tokens=completion.input_tokens,
                    output_tokens=completion.output_tokens,
                    cost=completion.cost,
                    finish_reason=completion.finish_reason,
                )
                return completion
        raise AssertionError("unreachable: the loop returns or raises")

    def _entry_policy(self, entry: str | ModelWithRetries) -> tuple[str, RetryPolicy]:
        """The router id of a chain entry and the retry policy its attempts follow."""
        if isinstance(entry, ModelWithRetries):
            return entry.model, replace(self.retry, max_retries=entry.max_retries)
        return entry, self.retry

    def embed(
        self,
        model: str,
        inputs: Sequence[str],
        *,
        timeout_s: float = 60,
        abort: threading.Event | None = None,
    ) -> list[list[float]]:
        """One embedding request for `inputs` (vectors in input order), through litellm's embedding API
        with the same retries, budgets and credential check as a completion. No fallback chain: vectors of
        two models are not comparable, so a failure fails the request."""
        routed = route(model)
        self._check_credentials(routed)

        def attempt() -> list[list[float]]:
            self.before_attempt(routed.router_id)
            if routed.is_local:
                from om_local.extractive import register_local_models

                register_local_models()
            litellm = _litellm()
            try:
                with _unlogged():
                    response = litellm.embedding(
                        model=routed.litellm_model,
                        input=list(inputs),
                        timeout=timeout_s,
                        num_retries=0,
                        max_retries=0,
                    )
            except Exception as exc:
                if _is_credentials_error(exc):
                    raise ModelCredentialsMissing(
                        routed.router_id, _env_vars_for(routed), detail=str(exc)[:300]
                    ) from exc
                raise
            items = sorted(response.data, key=lambda item: int(_field(item, "index") or 0))
            vectors = [[float(v) for v in _field(item, "embedding")] for item in items]
            if len(vectors) != len(inputs):
                raise ValueError(
                    f"{routed.router_id} returned {len(vectors)} vectors for {len(inputs)} inputs"
                )
            return vectors

        try:
            with tracing.model_call(routed.router_id, kind="embeddings"):
                result: list[list[float]] = self.retry.run(attempt, abort=abort)
        except Exception as exc:
            if is_abort(exc) or isinstance(exc, OMError):
                raise
            raise ModelCallFailed.of(routed.router_id, exc) from exc
        return result

    def accepts_images(self, model: str) -> bool | None:
        """Whether `model` takes image input by litellm's model data; None when litellm does not know it."""
        return accepts_images(model)

    def before_attempt(self, router_id: str) -> None:
        """Runs before every request sent to a provider (each retry, each fallback model): the place to
        meter or pace requests. Nothing by default."""

    # --- one call ---------------------------------------------------------------------------------------

    def _call_once(
        self,
        routed: RoutedModel,
        messages: list[dict[str, Any]],
        *,
        temperature: float | None,
        max_output_tokens: int | None,
        provider_options: Mapping[str, Any] | None,
        timeout_s: float,
        response_format: Mapping[str, Any] | None,
    ) -> Any:
        if routed.is_local:
            from om_local.extractive import register_local_models

            register_local_models()
        kwargs: dict[str, Any] = {
            "model": routed.litellm_model,
            "messages": messages,
            "timeout": timeout_s,
            # Our RetryPolicy is the only retry layer.
            "num_retries": 0,
            "max_retries": 0,
            # e.g. gpt-5 models reject any temperature but 1: drop it rather than fail the call.
            "drop_params": True,
        }
        if temperature is not None:
            kwargs["temperature"] = temperature
        if max_output_tokens is not None:
            kwargs["max_tokens"] = max_output_tokens
        if response_format is not None:
            kwargs["response_format"] = dict(response_format)
        kwargs.update(litellm_params_for(routed, provider_options))
        litellm = _litellm()
        try:
            with _unlogged():
                response = litellm.completion(**kwargs)
        except litellm.ContextWindowExceededError as exc:
            log.info("model %s: context window exceeded: %s", routed.router_id, exc)
            raise ContextWindowExceeded(routed.router_id, str(exc)) from exc
        except Exception as exc:
            if _is_credentials_error(exc):
                log.warning("model %s refused the credentials: %s", routed.router_id, exc)
                raise ModelCredentialsMissing(
                    routed.router_id, _env_vars_for(routed), detail=str(exc)[:300]
                ) from exc
            raise
        finish_reason = _finish_reason(response)
        if finish_reason is not None and finish_reason.lower() not in NORMAL_FINISH_REASONS:
            raise PartialCompletion(routed.router_id, finish_reason)
        return response

    def _check_credentials(self, routed: RoutedModel) -> None:
        if not self.check_credentials or routed.route is None or not routed.route.env_vars:
            return
        environ = self._environ if self._environ is not None else os.environ
        if not any(environ.get(name) for name in routed.route.env_vars):
            raise ModelCredentialsMissing(routed.router_id, routed.route.env_vars)


def _field(item: Any, name: str) -> Any:
    """A field of one embedding item: litellm gives dicts or objects depending on the provider."""
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def _messages(system: str, user: UserContent) -> list[dict[str, Any]]:
    content: Any = user if isinstance(user, str) else [dict(part) for part in user]
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": content})
    return messages


def load_litellm() -> None:
    """Import litellm now instead of on the first model call. A worker exists to call models: its first
    task should not wait for the import, and the import's objects belong in its frozen start-up heap
    (`om_core.process.startup_heap`)."""
    _litellm()


def _litellm() -> Any:
    """litellm, imported on the first model call: it costs ~7 s and ~100 MB, which a process that never
    calls a model (the API in celery mode, `om status`, `om migrate`) should not pay at start."""
    import litellm

    return litellm


def _unlogged() -> contextlib.AbstractContextManager[None]:
    """Around one litellm call: litellm does not hand the reply to its success logging.

    After a successful call litellm queues its logging on a background thread, where it builds the
    `StandardLoggingPayload`, re-reads the reply's cost (rerunning its zero-cost diagnostic on every call of
    a zero-priced model such as `om-local/extractive`) and runs the success callbacks: CPU the worker pays
    on each model call, for output nobody in om reads. om registers no litellm callback; the usage and the
    cost it records come from the response (`_completion`), which litellm prices inline, before the
    logging (`_hidden_params["response_cost"]`).

    litellm 1.110 has no setting for this: `turn_off_message_logging`, `no-log` and the callback lists
    change what the payload holds or who receives it, and it is built regardless. The switch is the
    context litellm runs its own nested calls under, whose success their parent logs (`internal_sub_call`:
    its sync wrapper then queues no success logging); on the SDK path nothing else reads it but litellm's
    response cache, which om does not use (litellm's own proxy server reads it too; om does not run it).
    The module is private, so `tests/unit/test_model_call_logging.py` holds the behaviour: a real call
    through om queues no success logging where a plain litellm call does, and the usage and cost om
    records are still litellm's. Failures are untouched: litellm's failure handler runs inline, before the
    error reaches the retry layer.
    """
    from litellm._internal_context import internal_sub_call

    return internal_sub_call()


def _is_credentials_error(exc: Exception) -> bool:
    if isinstance(exc, _litellm().AuthenticationError):
        return True
    return bool(_CREDENTIAL_HINT.search(str(exc)))


def _env_vars_for(routed: RoutedModel) -> tuple[str, ...]:
    if routed.route is not None and routed.route.env_vars:
        return routed.route.env_vars
    try:
        report = _litellm().validate_environment(model=routed.litellm_model)
    except Exception:
        return ()
    missing = report.get("missing_keys") if isinstance(report, dict) else None
    return tuple(str(name) for name in missing) if isinstance(missing, list) else ()


def _finish_reason(response: Any) -> str | None:
    choices = getattr(response, "choices", None) or []
    if not choices:
        return None
    reason = getattr(choices[0], "finish_reason", None)
    return str(reason) if reason is not None else None


def _text(response: Any) -> str:
    choices = getattr(response, "choices", None) or []
    if not choices:
        return ""
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else ""


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _cost(response: Any) -> float | None:
    """litellm's cost for the reply; None when litellm has no price for the model.

    litellm computes the cost while logging the call and stores it in the hidden params; when that key is
    present (even as None) asking again would only repeat the failed lookup.
    """
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict) and "response_cost" in hidden:
        value = hidden["response_cost"]
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    try:
        return float(_litellm().completion_cost(completion_response=response))
    except Exception:
        return None


def _completion(response: Any, router_id: str, attempts: int) -> Completion:
    usage = getattr(response, "usage", None)
    input_tokens = _count(getattr(usage, "prompt_tokens", 0))
    output_tokens = _count(getattr(usage, "completion_tokens", 0))
    total_tokens = _count(getattr(usage, "total_tokens", 0)) or input_tokens + output_tokens
    return Completion(
        text=_text(response),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=total_tokens,
        cost=_cost(response),
        model=router_id,
        finish_reason=_finish_reason(response),
        attempts=attempts,
    )
