"""om (Observational Memory) as an OpenAI Agents SDK session: `OMSession` (docs/guide/frameworks.md)."""

from __future__ import annotations

from om_openai_agents.mapping import context_to_items, items_to_turn_messages
from om_openai_agents.session import OMSession, OMSessionUnsupported

__all__ = ["OMSession", "OMSessionUnsupported", "context_to_items", "items_to_turn_messages"]
