"""Where observation groups are made (retrieval mode, spec §9.1): every observation run's new text is
wrapped with its range, and a reflection of grouped observations becomes one group whose range covers
those it condensed. The group row is written by the same commit that puts the text in the log."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from om_core.config import ResolvedConfig
from om_core.messages import Message
from om_core.observation_groups import (
    groups_in,
    merged_ranges,
    message_range,
    new_group_id,
    strip_wrappers,
    wrap,
)
from om_core.store.types import ObservationGroup


def group_observations(
    cfg: ResolvedConfig,
    observations: str,
    messages: Sequence[Message],
    *,
    thread_id: str,
    resource_id: str,
    key: str,
    cycle_id: str,
    observed_at: datetime,
) -> tuple[str, ObservationGroup | None]:
    """The text to commit and its group: `observations` wrapped with the range of `messages` when
    retrieval is on, else unchanged and no group."""
    if not cfg.retrieval or not messages:
        return observations, None
    body = strip_wrappers(observations).strip()
    group = ObservationGroup(
        id=new_group_id(),
        thread_id=thread_id,
        resource_id=resource_id,
        key=key,
        cycle_id=cycle_id,
        kind="observation",
        ranges=message_range(messages),
        text=body,
        observed_at=observed_at,
    )
    return wrap(body, group.id, group.ranges), group


def reflector_input(observations: str) -> tuple[str, str | None]:
    """What the Reflector is shown (no wrappers) and the merged range of the groups it condenses."""
    return strip_wrappers(observations), merged_ranges(groups_in(observations))


def group_reflection(
    reflection: str,
    ranges: str | None,
    *,
    thread_id: str,
    resource_id: str,
    key: str,
    cycle_id: str,
    observed_at: datetime,
) -> tuple[str, ObservationGroup | None]:
    """A reflection of grouped observations as one group over their ranges; else unchanged."""
    if ranges is None or not reflection.strip():
        return reflection, None
    body = strip_wrappers(reflection).strip()
    group = ObservationGroup(
        id=new_group_id(),
        thread_id=thread_id,
        resource_id=resource_id,
        key=key,
        cycle_id=cycle_id,
        kind="reflection",
        ranges=ranges,
        text=body,
        observed_at=observed_at,
    )
    return wrap(body, group.id, ranges), group
