"""om (Observational Memory) as LangChain v1 agent middleware: `OMMiddleware` (docs/guide/frameworks.md)."""

from __future__ import annotations

from om_langgraph.middleware import OMMiddleware

__all__ = ["OMMiddleware"]
