"""The OM use-cases behind one facade (`MemoryEngine`), the task values executors run, and the one task
table that says how each kind runs."""

from om_core.engine.core import EngineCore
from om_core.engine.cycle import Cycle
from om_core.engine.engine import MemoryEngine
from om_core.engine.extraction import persisted as extracted_values
from om_core.engine.log_edit import MAX_LINE_CHARS, LineEditError, LineEditResult
from om_core.engine.manual import OperationOutcome
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
    EXTRACT_QUEUE,
    INDEX_QUEUE,
    MAINTENANCE_QUEUE,
    MAINTENANCE_TASK,
    QUEUES,
    TASKS,
    WEBHOOK_QUEUE,
    BufferObservation,
    BufferReflection,
    DeliverWebhooks,
    Executor,
    ExtractValues,
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
from om_core.engine.turn_reply import TurnResult
from om_core.models.selection import resolve_model

__all__ = [
    "EXTRACT_QUEUE",
    "INDEX_QUEUE",
    "MAINTENANCE_QUEUE",
    "MAINTENANCE_TASK",
    "MAX_LINE_CHARS",
    "QUEUES",
    "TASKS",
    "WEBHOOK_QUEUE",
    "BufferObservation",
    "BufferReflection",
    "Completion",
    "Cycle",
    "DeliverWebhooks",
    "EngineCore",
    "EngineSettings",
    "EventPublisher",
    "Executor",
    "ExtractValues",
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
    "extracted_values",
    "kind_of",
    "lookup_key",
    "new_cycle_id",
    "resolve_model",
    "resource_key",
    "task_from_dict",
    "task_to_dict",
]
