"""One Reflector run: the compression ladder over the log (behaviour §4.6), with the model resolved by the
input's size and the Observer's instructions shown to the Reflector."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from om_core.config.options import ResolvedConfig
from om_core.engine.core import EngineCore
from om_core.engine.cycle import Cycle, Usage
from om_core.engine.extraction import NONE, RunExtractors
from om_core.engine.grouping import GroupPlace, group_reflection
from om_core.engine.observer_call import observer_system_prompt
from om_core.extractors.definition import dump_value
from om_core.models.reply_checks import unusable_reply
from om_core.models.selection import CallModel, primary_model, resolve_model
from om_core.observations.text import strip_tag_blocks
from om_core.observer.prompt import inline_extractor_section
from om_core.policy import decisions
from om_core.reflector.prompt import (
    LadderResult,
    ModelReply,
    ReflectorOutput,
    ReflectorPromptOptions,
    RetryInfo,
    build_reflector_system_prompt,
    reflect_with_ladder,
)
from om_core.store.types import ObservationGroup, Record


@dataclass(frozen=True)
class _ReflectorModel:
    """The model call the ladder makes at each level."""

    core: EngineCore
    cfg: ResolvedConfig
    model: CallModel
    #: Inline extractor tags: removed from each reply before the ladder parses it.
    tags: tuple[str, ...] = ()
    #: Each reply as the model wrote it, by the text the ladder parsed (so the kept one can be found).
    raw: dict[str, str] = field(default_factory=dict)

    def __call__(self, system: str, user: str) -> ModelReply:
        completion = self.core.complete(self.cfg, self.cfg.reflection, self.model, system=system, user=user)
        text = (
            strip_tag_blocks(completion.text, self.tags, line_anchored=False)
            if self.tags
            else completion.text
        )
        self.raw[text] = completion.text
        return ModelReply(
            text,
            completion.input_tokens,
            completion.output_tokens,
            completion.cost,
            unusable=unusable_reply(completion.text, completion.finish_reason),
        )


def run_ladder(
    core: EngineCore,
    cfg: ResolvedConfig,
    observations: str,
    *,
    target: int,
    include_hints: bool,
    manual_prompt: str | None,
    on_retry: Callable[[RetryInfo], None] | None,
    extractors: RunExtractors = NONE,
) -> tuple[LadderResult, str]:
    """Reflect `observations` toward `target` tokens; raises what the ladder raises. Returns the result
    and the kept reply as the model wrote it: `extractors`' inline sections (described at the end of the
    system prompt, with their priors) are stripped before parsing and read from that text."""
    model = resolve_model(cfg.reflection.model, core.counter.count_string(observations))
    start_level = decisions.compression_start_level(primary_model(model), manual=manual_prompt is not None)
    system = build_reflector_system_prompt(
        ReflectorPromptOptions(
            observer_instructions=observer_system_prompt(cfg, include_hints=True),
            instruction=cfg.reflection.instruction,
            include_hints=include_hints,
        )
    )
    system = system + _extractor_section(extractors)
    call = _ReflectorModel(core, cfg, model, extractors.section_tags)
    result = reflect_with_ladder(
        observations,
        target=target,
        start_level=start_level,
        include_hints=include_hints,
        call=call,
        count=core.counter.count_string,
        manual_prompt=manual_prompt,
        on_retry=on_retry,
        system_prompt=system,
    )
    return result, call.raw.get(result.output.raw, result.output.raw)


def _extractor_section(extractors: RunExtractors) -> str:
    if not extractors.inline:
        return ""
    section = "\n\n" + inline_extractor_section(extractors.prompts)
    if extractors.priors:
        blocks = "\n".join(f"<{slug}>\n{dump_value(v)}\n</{slug}>" for slug, v in extractors.priors.items())
        section += f"\nPrevious values (update them only when the observations justify it):\n{blocks}"
    return section


def ladder_usage(result: LadderResult) -> Usage:
    return Usage(result.input_tokens, result.output_tokens, result.cost)


@dataclass(frozen=True)
class Reflected:
    """A Reflector run as a cycle commits it: the hints, the reply as written (its inline extractor
    sections), the log text (wrapped as a group when groups are on), its tokens and its group."""

    output: ReflectorOutput
    raw: str
    text: str
    tokens: int
    group: ObservationGroup | None


def reflect_for(
    core: EngineCore,
    cycle: Cycle,
    cfg: ResolvedConfig,
    log: Record,
    observations: str,
    ranges: str | None,
    *,
    target: int,
    include_hints: bool,
    manual_prompt: str | None,
    on_retry: Callable[[RetryInfo], None] | None,
    extractors: RunExtractors,
) -> Reflected:
    """`run_ladder` for `cycle` (which then reports the ladder's usage), its output grouped as a reflection
    of `log` by the cycle it ended in (a retry starts another)."""
    result, raw = run_ladder(
        core,
        cfg,
        observations,
        target=target,
        include_hints=include_hints,
        manual_prompt=manual_prompt,
        on_retry=on_retry,
        extractors=extractors,
    )
    text, group = group_reflection(
        result.output.observations.strip(),
        ranges,
        GroupPlace(cycle.thread_id, log.resource_id, log.lookup_key, cycle.cycle_id, core.clock()),
    )
    cycle.usage = ladder_usage(result)
    return Reflected(result.output, raw, text, core.counter.count_string(text), group)
