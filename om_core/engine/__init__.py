"""The OM use-cases behind one facade (`MemoryEngine`), the task values executors run, and the one task
table that says how each kind runs."""

from om_core.engine.core import EngineCore, resolve_model
from om_core.engine.cycle import Cycle
from om_core.engine.engine import MemoryEngine, OperationOutcome
from om_core.engine.log_edit import LineEditError, LineEditResult
from om_core.engine.ports import (
    Completion,
    EngineSettings,
    EventPublisher,
    MemoryDisabled,
    ModelCaller,
    ObserverDegenerateError,
    ThreadIdRequired,
)
from om_core.engine.tasks import (
    INDEX_QUEUE,
    MAINTENANCE_QUEUE,
    MAINTENANCE_TASK,
    QUEUES,
    TASKS,
    BufferObservation,
    BufferReflection,
    Executor,
    IndexThread,
    InlineExecutor,
    Observe,
    ObserveBatch,
    Reflect,
    Task,
    TaskKind,
    kind_of,
    lookup_key,
    new_cycle_id,
    resource_key,
    task_from_dict,
    task_to_dict,
)
from om_core.engine.turn import TurnResult

__all__ = [
    "INDEX_QUEUE",
    "MAINTENANCE_QUEUE",
    "MAINTENANCE_TASK",
    "QUEUES",
    "TASKS",
    "BufferObservation",
    "BufferReflection",
    "Completion",
    "Cycle",
    "EngineCore",
    "EngineSettings",
    "EventPublisher",
    "Executor",
    "IndexThread",
    "InlineExecutor",
    "LineEditError",
    "LineEditResult",
    "MemoryDisabled",
    "MemoryEngine",
    "ModelCaller",
    "Observe",
    "ObserveBatch",
    "ObserverDegenerateError",
    "OperationOutcome",
    "Reflect",
    "Task",
    "TaskKind",
    "ThreadIdRequired",
    "TurnResult",
    "kind_of",
    "lookup_key",
    "new_cycle_id",
    "resolve_model",
    "resource_key",
    "task_from_dict",
    "task_to_dict",
]
