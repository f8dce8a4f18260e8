"""One Observer call: the prompt from the log and the messages, the model, and a reply OM can use.

Shared by buffered and blocking observation, so both show the Observer the same context (the active log
plus chunks waiting, deduplicated against a buffered reflection) and reject the same unusable replies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from om_core.config.options import ResolvedConfig
from om_core.engine.core import EngineCore
from om_core.engine.cycle import Usage
from om_core.engine.extraction import NONE, RunExtractors
from om_core.engine.ports import ObserverDegenerateError, UserContent
from om_core.messages import Message
from om_core.models.reply_checks import unusable_reply
from om_core.models.selection import CallModel, primary_model, resolve_model
from om_core.observations.groups import strip_wrappers
from om_core.observations.text import strip_tag_blocks
from om_core.observer.input import forwarding_rule, observer_user_content, render_histories
from om_core.observer.prompt import (
    InlineExtractorPrompt,
    MultiThreadObserverOutput,
    ObserverOutput,
    ObserverPromptOptions,
    PriorThreadMetadata,
    build_observer_system_prompt,
    build_observer_user_message,
    combine_for_observer,
    parse_multi_thread_output,
    parse_observer_output,
    prepare_observer_context,
    render_thread_blocks,
    thread_bodies,
)
from om_core.store import history
from om_core.store.types import Record

#: Calls per observation: one retry after an unusable or degenerate reply, then the cycle fails.
_ATTEMPTS = 2


def observer_system_prompt(
    cfg: ResolvedConfig, include_hints: bool, inline: tuple[InlineExtractorPrompt, ...] = ()
) -> str:
    return build_observer_system_prompt(
        ObserverPromptOptions(
            thread_title=cfg.observation.thread_title,
            include_hints=include_hints,
            instruction=cfg.observation.instruction,
            inline_extractors=inline,
        )
    )


def attachment_rule(core: EngineCore, cfg: ResolvedConfig, model: CallModel) -> bool | Sequence[str]:
    """Which attachments reach the Observer (§5.5). "auto" reads the capability data of the primary model
    of the call (the one capability decisions follow, §11.2), after tiers are resolved for its input."""
    return forwarding_rule(
        cfg.observation.observe_attachments, lambda: core.models.accepts_images(primary_model(model))
    )


def observe_messages(
    core: EngineCore,
    cfg: ResolvedConfig,
    head: Record,
    batch: Sequence[Message],
    usage: Usage,
    *,
    thread: history.ThreadRow | None,
    log: Record | None = None,
    extractors: RunExtractors = NONE,
) -> ObserverOutput:
    """Observations of `batch`. `thread` is the caller's read of the thread (its metadata feeds the
    prompt); usage of every call is added to `usage`, also of calls whose reply was not usable. `log` is
    the log the observations will join when it is not `head`'s own (resource scope: the resource's).

    The user message carries the batch's images and files as content parts when `observeAttachments`
    forwards any (`observer.input`); placeholders stay in the transcript either way. `extractors` adds the
    run's inline extractor sections to the prompt (with their priors) and strips them from the
    observations; the caller reads their values from the output's `raw` text."""
    meta = thread.om_metadata if thread is not None else {}
    log = log or head
    histories = render_histories([batch], head.observed_timezone, counter=core.counter.count_string)
    previous, truncated = prepare_observer_context(
        combine_for_observer(log.active_observations, [c.observations for c in head.chunks]),
        budget=cfg.observation.previous_observer_tokens,
        buffered_reflection=log.buffered_reflection,
        reflected_line_count=log.reflected_observation_line_count,
        count=core.counter.count_string,
        count_line=core.line_counts,
    )
    previous = strip_wrappers(previous)  # a model shown group wrappers starts writing its own
    system = observer_system_prompt(cfg, include_hints=True, inline=extractors.prompts)

    def compose(texts: Sequence[str]) -> str:
        return build_observer_user_message(
            transcript=texts[0],
            previous_observations=previous,
            previous_truncated=truncated,
            prior_current_task=meta.get("currentTask"),
            prior_suggested_response=meta.get("suggestedResponse"),
            prior_thread_title=meta.get("threadTitle") if cfg.observation.thread_title else None,
            include_hints=True,
            prior_extractions=extractors.priors,
        )

    model = resolve_model(cfg.observation.model, core.counter.count_messages(batch))
    user = observer_user_content(histories, compose, attachment_rule(core, cfg, model))
    tags = extractors.section_tags

    def parse(text: str) -> ObserverOutput:
        # Inline sections go before parsing, wherever the model put them (inside <observations> too); the
        # raw text keeps them for `extraction.inline_values`.
        stripped = strip_tag_blocks(text, tags, line_anchored=False) if tags else text
        return replace(parse_observer_output(stripped, extra_sections=tags), raw=text)

    return _usable_reply(core, cfg, model, system, user, usage, parse)


def observe_threads(
    core: EngineCore,
    cfg: ResolvedConfig,
    log: Record,
    sections: Mapping[str, tuple[history.ThreadRow, Sequence[Message]]],
    usage: Usage,
    extractors: Mapping[str, RunExtractors] | None = None,
) -> MultiThreadObserverOutput:
    """Observations of several threads of a resource in one call (§4.12, §5.2 multi-thread), keyed by
    the labels of `sections` (what the model sees for each thread). The previous observations are the
    resource's shared log; each thread's priors are shown under its label. Attachments travel as in
    `observe_messages`, each inside its thread's block, numbered across the batch (§5.5). `extractors`
    (by label; one configuration, so one set of sections) asks for inline extractor sections inside each
    thread block, with each thread's priors; each thread's `raw` is its block as the model wrote it."""
    labels = list(sections)
    runs = extractors or {}
    any_run = next(iter(runs.values()), NONE)
    histories = render_histories(
        [messages for _thread, messages in sections.values()],
        log.observed_timezone,
        counter=core.counter.count_string,
    )
    previous, truncated = prepare_observer_context(
        log.active_observations,
        budget=cfg.observation.previous_observer_tokens,
        buffered_reflection=log.buffered_reflection,
        reflected_line_count=log.reflected_observation_line_count,
        count=core.counter.count_string,
        count_line=core.line_counts,
    )
    previous = strip_wrappers(previous)
    system = build_observer_system_prompt(
        ObserverPromptOptions(
            thread_title=cfg.observation.thread_title,
            include_hints=True,
            instruction=cfg.observation.instruction,
            multi_thread=True,
            inline_extractors=any_run.prompts,
        )
    )
    priors = {
        label: PriorThreadMetadata(
            thread.om_metadata.get("currentTask"),
            thread.om_metadata.get("suggestedResponse"),
            thread.om_metadata.get("threadTitle") if cfg.observation.thread_title else None,
            dict(runs[label].priors) if label in runs else {},
        )
        for label, (thread, _messages) in sections.items()
    }

    def compose(texts: Sequence[str]) -> str:
        return build_observer_user_message(
            transcript=render_thread_blocks(dict(zip(labels, texts, strict=True))),
            previous_observations=previous,
            previous_truncated=truncated,
            prior_current_task=None,
            prior_suggested_response=None,
            prior_thread_title=None,
            include_hints=True,
            multi_thread=True,
            prior_by_thread=priors,
        )

    input_tokens = sum(core.counter.count_messages(list(m)) for _t, m in sections.values())
    model = resolve_model(cfg.observation.model, input_tokens)
    user = observer_user_content(histories, compose, attachment_rule(core, cfg, model))
    tags = any_run.section_tags

    def parse(text: str) -> MultiThreadObserverOutput:
        if not tags:
            return parse_multi_thread_output(text)
        parsed = parse_multi_thread_output(
            strip_tag_blocks(text, tags, line_anchored=False), extra_sections=tags
        )
        raw = thread_bodies(text)
        threads = {label: replace(out, raw=raw.get(label, out.raw)) for label, out in parsed.threads.items()}
        return replace(parsed, threads=threads, raw=text)

    return _usable_reply(core, cfg, model, system, user, usage, parse)


class _Parsed(Protocol):
    @property
    def degenerate(self) -> bool: ...


P = TypeVar("P", bound=_Parsed)


def _usable_reply(
    core: EngineCore,
    cfg: ResolvedConfig,
    model: CallModel,
    system: str,
    user: UserContent,
    usage: Usage,
    parse: Callable[[str], P],
) -> P:
    """The first usable, non-degenerate reply within `_ATTEMPTS` calls, parsed; else the Observer is
    degenerate for this input."""
    last_problem = "empty"
    partial = ""
    for _attempt in range(_ATTEMPTS):
        completion = core.complete(cfg, cfg.observation, model, system=system, user=user)
        usage.add(completion)
        unusable = unusable_reply(completion.text, completion.finish_reason)
        if unusable is not None:
            last_problem = unusable
            partial = partial_observations(parse(storable(completion.text)))
            continue
        output = parse(completion.text)
        if not output.degenerate:
            return output
        last_problem = "degenerate output (repetition loop)"
        partial = ""
    raise ObserverDegenerateError(
        f"the Observer produced {last_problem} twice for model {primary_model(model)}", partial
    )


#: Most characters of partial observations a failed event carries (it is for display).
PARTIAL_OBSERVATIONS_CHARS = 20_000


def storable(text: str) -> str:
    """`text` without what a database refuses (NUL characters, unpaired surrogates)."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def partial_observations(output: _Parsed) -> str:
    """The observations an unusable reply held (every thread's, labelled, for a multi-thread reply),
    cut to `PARTIAL_OBSERVATIONS_CHARS`: what the failed event shows."""
    if isinstance(output, MultiThreadObserverOutput):
        text = "\n".join(
            f'<thread id="{label}">\n{out.observations}\n</thread>'
            for label, out in output.threads.items()
            if out.observations.strip()
        )
    else:
        text = getattr(output, "observations", "")
    return text.strip()[:PARTIAL_OBSERVATIONS_CHARS]
