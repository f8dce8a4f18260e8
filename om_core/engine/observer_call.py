"""One Observer call: the prompt from the log and the messages, the model, and a reply OM can use.

Shared by buffered and blocking observation, so both show the Observer the same context (the active log
plus chunks waiting, deduplicated against a buffered reflection) and reject the same unusable replies.
"""

from __future__ import annotations

from collections.abc import Sequence

from om_core.config import ResolvedConfig
from om_core.engine.core import EngineCore, primary_model, resolve_model
from om_core.engine.cycle import Usage
from om_core.engine.ports import ObserverDegenerateError
from om_core.messages import Message
from om_core.observer import (
    ObserverOutput,
    ObserverPromptOptions,
    build_observer_system_prompt,
    build_observer_user_message,
    combine_for_observer,
    parse_observer_output,
    prepare_observer_context,
)
from om_core.reply_checks import unusable_reply
from om_core.store import history
from om_core.store.types import Record
from om_core.transcript import render_transcript

#: Calls per observation: one retry after an unusable or degenerate reply, then the cycle fails.
_ATTEMPTS = 2


def observer_system_prompt(cfg: ResolvedConfig, include_hints: bool) -> str:
    return build_observer_system_prompt(
        ObserverPromptOptions(
            thread_title=cfg.observation.thread_title,
            include_hints=include_hints,
            instruction=cfg.observation.instruction,
        )
    )


def observe_messages(
    core: EngineCore,
    cfg: ResolvedConfig,
    head: Record,
    batch: Sequence[Message],
    usage: Usage,
    *,
    thread: history.ThreadRow | None,
) -> ObserverOutput:
    """Observations of `batch`. `thread` is the caller's read of the thread (its metadata feeds the
    prompt); usage of every call is added to `usage`, also of calls whose reply was not usable."""
    meta = thread.om_metadata if thread is not None else {}
    transcript = render_transcript(batch, head.observed_timezone, counter=core.counter.count_string)
    previous, truncated = prepare_observer_context(
        combine_for_observer(head.active_observations, [c.observations for c in head.chunks]),
        budget=cfg.observation.previous_observer_tokens,
        buffered_reflection=head.buffered_reflection,
        reflected_line_count=head.reflected_observation_line_count,
        count=core.counter.count_string,
        count_line=core.line_counts,
    )
    system = observer_system_prompt(cfg, include_hints=True)
    user = build_observer_user_message(
        transcript=transcript.text,
        previous_observations=previous,
        previous_truncated=truncated,
        prior_current_task=meta.get("currentTask"),
        prior_suggested_response=meta.get("suggestedResponse"),
        prior_thread_title=meta.get("threadTitle") if cfg.observation.thread_title else None,
        include_hints=True,
    )
    model = resolve_model(cfg.observation.model, core.counter.count_messages(batch))
    last_problem = "empty"
    for _attempt in range(_ATTEMPTS):
        completion = core.models.complete(
            model,
            system=system,
            user=user,
            temperature=cfg.observation.temperature,
            max_output_tokens=cfg.observation.max_output_tokens,
            provider_options=cfg.observation.provider_options,
        )
        usage.add(completion)
        unusable = unusable_reply(completion.text, completion.finish_reason)
        if unusable is not None:
            last_problem = unusable
            continue
        output = parse_observer_output(completion.text)
        if not output.degenerate:
            return output
        last_problem = "degenerate output (repetition loop)"
    raise ObserverDegenerateError(
        f"the Observer produced {last_problem} twice for model {primary_model(model)}"
    )
