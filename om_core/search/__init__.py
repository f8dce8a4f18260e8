"""Search over what a resource remembers: observation groups and raw messages, lexical and semantic.

`search(db, request, embedder=None)` is the entry point (`query.search`); `Searcher(db, embedder)` is the
same bound to a database, the `Callable[[SearchRequest], list[SearchHit]]` the recall tool takes. Modules:
`documents` (what text a message or group contributes), `index` (writing documents and vectors, index lag),
`lexical` (Postgres full-text search, SQLite FTS5), `vectors` (pgvector, sqlite-vec), `embedder`
(litellm embeddings), `query` (ranking and fusion), `errors`, `types`.
"""

from om_core.search.errors import NothingIndexed, RetrievalDisabled, VectorSearchUnavailable
from om_core.search.query import Searcher, search
from om_core.search.types import HitKind, SearchHit, SearchRequest

__all__ = [
    "HitKind",
    "NothingIndexed",
    "RetrievalDisabled",
    "SearchHit",
    "SearchRequest",
    "Searcher",
    "VectorSearchUnavailable",
    "search",
]
