"""The errors search raises on purpose."""

from __future__ import annotations

from om_core.errors import OMError


class VectorSearchUnavailable(OMError, RuntimeError):
    """`retrieval.vector` is on but the database cannot store vectors. Raised, never worked around: a
    search that silently fell back to words only would look like a poor model, not a missing extension."""

    def __init__(self, detail: str) -> None:
        super().__init__("VECTOR_SEARCH_UNAVAILABLE", f"[VECTOR_SEARCH_UNAVAILABLE] {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (str(self),))


def _rebuild(message: str) -> VectorSearchUnavailable:
    error = VectorSearchUnavailable("")
    error.args = (message,)
    return error


class RetrievalDisabled(OMError, ValueError):
    """Search asked of a thread or resource whose effective config has `retrieval` off: nothing is
    indexed there, so an empty answer would be a lie; refused, saying how to turn it on."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(
            "RETRIEVAL_DISABLED",
            f"[RETRIEVAL_DISABLED] retrieval is off for {what}: set `retrieval: true` (and "
            "`retrieval.vector: true` for semantic search) in its config to index and search it",
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (RetrievalDisabled, (self.what,))


class NothingIndexed(RetrievalDisabled):
    """A resource search found no indexed thread to cover. `asked` says whether the caller narrowed the
    search with `thread_ids` (then none of those is indexed, though others may be)."""

    def __init__(self, what: str, asked: bool = False) -> None:
        self.asked = asked
        super().__init__(what)

    def __reduce__(self) -> tuple[object, ...]:
        return (NothingIndexed, (self.what, self.asked))


#: What to install, per database, in the error's message.
POSTGRES_HINT = (
    "the Postgres server has no pgvector extension: install it (e.g. the pgvector/pgvector:pg15 image, or "
    "the postgresql-15-pgvector package) and let om's database user run CREATE EXTENSION vector, or turn "
    "retrieval.vector off"
)
SQLITE_HINT = (
    "this SQLite cannot load sqlite-vec: install the pysqlite3-binary and sqlite-vec packages "
    "(`pip install pysqlite3-binary sqlite-vec`, both om dependencies on Linux x86-64), or turn "
    "retrieval.vector off"
)
