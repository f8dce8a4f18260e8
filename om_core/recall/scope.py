"""What one recall call may read (§9.2): the active thread, and in resource scope the other threads of
its resource. Every thread a call names is resolved here, so access control is written once.

A thread id a model names is a public id; its stored id carries the active thread's tenant
(`om_core.tenancy.scoped_ids`), so a model can only ever name threads of its own tenant, and a thread of
another resource is answered exactly like one that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Connection

from om_core.recall.budget import Count
from om_core.recall.errors import RecallNotFound
from om_core.store.recall_reads import ThreadInfo, thread_info
from om_core.tenancy.scoped_ids import PublicId, StoredId, public_id, scoped_id, tenant_of

__all__ = ["RecallScope", "sibling_id"]


def sibling_id(active_stored: StoredId, public: PublicId) -> StoredId:
    """The stored id of `public` in the active thread's tenant."""
    return scoped_id(tenant_of(active_stored), public)


@dataclass(frozen=True)
class RecallScope:
    """The active thread, the retrieval scope and the token counter of one call."""

    active: ThreadInfo
    scope: Literal["thread", "resource"]
    count: Count

    @property
    def spans_resource(self) -> bool:
        return self.scope == "resource"

    def is_active(self, thread: ThreadInfo) -> bool:
        return thread.id == self.active.id

    def thread(self, conn: Connection, thread_id: PublicId | None) -> ThreadInfo:
        """The thread a call reads: the active one (no id, `"current"`, or its own id), or in resource
        scope another thread of the same resource; anything else is `RecallNotFound`."""
        if thread_id in (None, "current", public_id(self.active.id)):
            return self.active
        assert thread_id is not None
        if not self.spans_resource:
            raise RecallNotFound(
                f'thread "{thread_id}" cannot be read here: recall is limited to the current thread '
                '(retrieval scope "thread"); leave threadId out'
            )
        found = thread_info(conn, sibling_id(self.active.id, thread_id))
        if (
            found is None
            or found.resource_id != self.active.resource_id
            or found.tenant_id != self.active.tenant_id
        ):
            raise RecallNotFound(
                f'thread "{thread_id}" was not found among this user\'s conversations; list them with '
                'mode "threads"'
            )
        return found
