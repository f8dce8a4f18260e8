"""An import wired to an engine: its token counter, its config checks, the operator's limits.

The shells (`POST /v1/import`, `om import`) call `import_into`; the importer itself stays storage and
callbacks, testable without an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from om_core.config.settings import Settings
from om_core.engine import MemoryEngine
from om_core.extractors.registry import check_tenant_overrides
from om_core.messages import Part
from om_core.queries import require_vector_support
from om_core.store.records import deep_merge
from om_core.transfer.importer import ImportLimits, ImportReport, import_lines

__all__ = ["import_into", "limits_of"]


def limits_of(settings: Settings) -> ImportLimits:
    return ImportLimits(max_lines=settings.max_import_lines, max_line_bytes=settings.max_import_line_bytes)


def import_into(
    engine: MemoryEngine,
    lines: Iterable[bytes | str],
    *,
    tenant_id: str | None,
    limits: ImportLimits,
    on_progress: Callable[[ImportReport], None] | None = None,
) -> ImportReport:
    """Import a file's lines into the tenant's memory (`importer.import_lines`)."""

    def count_part(part: Part) -> tuple[float, float, int]:
        counted = engine.counter.count_part(part, None)
        return (counted.tokens, counted.overhead_delta, counted.extra_messages)

    def check_config(
        overrides: dict[str, Any] | None, base: dict[str, Any] | None, tenant: str | None
    ) -> None:
        # The same checks as `PUT .../config`: the merge resolves, the operator's policy allows it, the
        # names of operator code in it are the tenant's, vector search is available when asked for.
        merged = deep_merge(dict(base or {}), overrides or {}) if base else overrides
        require_vector_support(engine, engine.check_overrides(merged or None))
        check_tenant_overrides(overrides if overrides is not None else base, tenant)

    return import_lines(
        engine.db,
        lines,
        tenant_id=tenant_id,
        count_part=count_part,
        check_config=check_config,
        limits=limits,
        on_progress=on_progress,
    )
