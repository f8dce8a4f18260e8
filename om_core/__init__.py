"""The OM core: every behaviour of the memory, with no web framework, task queue or Redis client.

This module is its public surface, what the shells (`om_api`, `om_workers`) and the application layer
(`om_app`) build on: the engine and its task values, the settings and the wiring that builds an engine
from them, messages, errors, and the ports a shell implements (`Coordination`, `EventPublisher`,
`RateLimiter`). Anything else is imported from its submodule where it is genuinely needed
(`om_core.store.outbox`, the engine's task table, ...).

The names are loaded on first use, not when the package is imported: every `import om_core.x` runs this
file first, and some imports must stay cheap or come first. `om serve` caps malloc arenas and loads the
tokenizer before anything else (`om_core.process`), and `om_core.models.selection` must not pull in the
engine. So a name here is imported only when someone asks for it. Core submodules never import from this
module (they import each other directly, which keeps cycles out); `make lint` checks it.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

#: litellm reads its price table when it is first imported: from the internet unless this variable is
#: "True", so prices (and the recorded cost of every call) would depend on a remote file that changes
#: under a running deployment, and each start would wait on the network. Every om process imports this
#: package before any module that imports litellm (each `om_*` package imports it first), so this line
#: pins litellm to the table it ships with; it overrides any other value on purpose. (`om_local`, below the
#: core and importable alone, pins the same value for itself.)
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

if TYPE_CHECKING:
    from om_core.config.settings import Settings as Settings
    from om_core.coordination import Coordination as Coordination
    from om_core.coordination import Peek as Peek
    from om_core.engine import BufferObservation as BufferObservation
    from om_core.engine import BufferReflection as BufferReflection
    from om_core.engine import EngineSettings as EngineSettings
    from om_core.engine import EventPublisher as EventPublisher
    from om_core.engine import Executor as Executor
    from om_core.engine import MemoryDisabled as MemoryDisabled
    from om_core.engine import MemoryEngine as MemoryEngine
    from om_core.engine import Observe as Observe
    from om_core.engine import Reflect as Reflect
    from om_core.engine import Task as Task
    from om_core.engine import TurnResult as TurnResult
    from om_core.engine import lookup_key as lookup_key
    from om_core.engine import new_cycle_id as new_cycle_id
    from om_core.engine import task_from_dict as task_from_dict
    from om_core.engine import task_to_dict as task_to_dict
    from om_core.errors import OMConfigError as OMConfigError
    from om_core.errors import OMError as OMError
    from om_core.errors import OperationFailed as OperationFailed
    from om_core.maintenance.sweep import MaintenancePolicy as MaintenancePolicy
    from om_core.maintenance.sweep import run_maintenance as run_maintenance
    from om_core.messages import Message as Message
    from om_core.messages import Part as Part
    from om_core.messages import Role as Role
    from om_core.messages import text_message as text_message
    from om_core.models.rate_limit import RateLimiter as RateLimiter
    from om_core.runtime import build_engine as build_engine
    from om_core.store.types import StoredEvent as StoredEvent
    from om_core.tenancy.scoped_ids import PublicId as PublicId
    from om_core.tenancy.scoped_ids import StoredId as StoredId
    from om_core.tenancy.scoped_ids import public_id as public_id
    from om_core.tenancy.scoped_ids import scoped_id as scoped_id

#: Where each public name lives. Engine names come from the package `om_core.engine`, never from its
#: modules, so the engine can be split without moving this surface.
_HOMES: dict[str, str] = {
    "BufferObservation": "om_core.engine",
    "BufferReflection": "om_core.engine",
    "Coordination": "om_core.coordination",
    "EngineSettings": "om_core.engine",
    "EventPublisher": "om_core.engine",
    "Executor": "om_core.engine",
    "MaintenancePolicy": "om_core.maintenance.sweep",
    "MemoryDisabled": "om_core.engine",
    "MemoryEngine": "om_core.engine",
    "Message": "om_core.messages",
    "OMConfigError": "om_core.errors",
    "OMError": "om_core.errors",
    "Observe": "om_core.engine",
    "OperationFailed": "om_core.errors",
    "Part": "om_core.messages",
    "Peek": "om_core.coordination",
    "PublicId": "om_core.tenancy.scoped_ids",
    "RateLimiter": "om_core.models.rate_limit",
    "Reflect": "om_core.engine",
    "Role": "om_core.messages",
    "Settings": "om_core.config.settings",
    "StoredEvent": "om_core.store.types",
    "StoredId": "om_core.tenancy.scoped_ids",
    "Task": "om_core.engine",
    "TurnResult": "om_core.engine",
    "build_engine": "om_core.runtime",
    "lookup_key": "om_core.engine",
    "new_cycle_id": "om_core.engine",
    "public_id": "om_core.tenancy.scoped_ids",
    "run_maintenance": "om_core.maintenance.sweep",
    "scoped_id": "om_core.tenancy.scoped_ids",
    "task_from_dict": "om_core.engine",
    "task_to_dict": "om_core.engine",
    "text_message": "om_core.messages",
}

__all__ = [
    "BufferObservation",
    "BufferReflection",
    "Coordination",
    "EngineSettings",
    "EventPublisher",
    "Executor",
    "MaintenancePolicy",
    "MemoryDisabled",
    "MemoryEngine",
    "Message",
    "OMConfigError",
    "OMError",
    "Observe",
    "OperationFailed",
    "Part",
    "Peek",
    "PublicId",
    "RateLimiter",
    "Reflect",
    "Role",
    "Settings",
    "StoredEvent",
    "StoredId",
    "Task",
    "TurnResult",
    "build_engine",
    "lookup_key",
    "new_cycle_id",
    "public_id",
    "run_maintenance",
    "scoped_id",
    "task_from_dict",
    "task_to_dict",
    "text_message",
]

if not TYPE_CHECKING:  # hidden from mypy, which would otherwise accept any name as `object`

    def __getattr__(name: str) -> object:
        """Import a public name's module on first use (PEP 562). Any other name is an AttributeError, which
        is also how `from om_core import tenancy` falls through to importing the submodule."""
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'om_core' has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
