"""The OM use-cases (`MemoryEngine`) and the task values executors run."""

from om_core.engine.engine import (
    EngineSettings,
    MemoryDisabled,
    MemoryEngine,
    TurnResult,
    lookup_key,
    resolve_model,
)
from om_core.engine.tasks import (
    BufferObservation,
    BufferReflection,
    Executor,
    InlineExecutor,
    Observe,
    Reflect,
    Task,
    new_cycle_id,
    task_from_dict,
    task_to_dict,
)

__all__ = [
    "BufferObservation",
    "BufferReflection",
    "EngineSettings",
    "Executor",
    "InlineExecutor",
    "MemoryDisabled",
    "MemoryEngine",
    "Observe",
    "Reflect",
    "Task",
    "TurnResult",
    "lookup_key",
    "new_cycle_id",
    "resolve_model",
    "task_from_dict",
    "task_to_dict",
]
