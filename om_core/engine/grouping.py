"""Where observation groups are made (retrieval mode, behaviour §9.1): every observation run's new text is
wrapped with its range, and a reflection of grouped observations becomes one group whose range covers
those it condensed. The group row is written by the same commit that puts the text in the log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from om_core.config.options import ResolvedConfig
from om_core.messages import Message
from om_core.observations.groups import (
    groups_in,
    merged_ranges,
    message_range,
    new_group_id,
    strip_wrappers,
    wrap,
)
from om_core.store.types import ObservationGroup
from om_core.tenancy.scoped_ids import StoredId


@dataclass(frozen=True)
class GroupPlace:
    """Where a group is committed: its thread, resource, log key and cycle, and when it was observed."""

    thread_id: StoredId
    resource_id: StoredId
    key: str
    cycle_id: str
    observed_at: datetime


def group_observations(
    cfg: ResolvedConfig, observations: str, messages: Sequence[Message], place: GroupPlace
) -> tuple[str, ObservationGroup | None]:
    """The text to commit and its group: `observations` wrapped with the range of `messages` when
    retrieval is on, else unchanged and no group."""
    if not cfg.retrieval or not messages:
        return observations, None
    return _grouped(observations, message_range(messages), "observation", place)


def reflector_input(observations: str) -> tuple[str, str | None]:
    """What the Reflector is shown (no wrappers) and the merged range of the groups it condenses."""
    return strip_wrappers(observations), merged_ranges(groups_in(observations))


def group_reflection(
    reflection: str, ranges: str | None, place: GroupPlace
) -> tuple[str, ObservationGroup | None]:
    """A reflection of grouped observations as one group over their ranges; else unchanged."""
    if ranges is None or not reflection.strip():
        return reflection, None
    return _grouped(reflection, ranges, "reflection", place)


def _grouped(text: str, ranges: str, kind: str, place: GroupPlace) -> tuple[str, ObservationGroup]:
    body = strip_wrappers(text).strip()
    group = ObservationGroup(
        id=new_group_id(),
        thread_id=place.thread_id,
        resource_id=place.resource_id,
        key=place.key,
        cycle_id=place.cycle_id,
        kind=kind,
        ranges=ranges,
        text=body,
        observed_at=place.observed_at,
    )
    return wrap(body, group.id, ranges), group
