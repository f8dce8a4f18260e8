"""The recall tool (behaviour §9.2–§9.4): a chat model reads the raw messages behind its observations.

`MemoryEngine.recall(thread_id, params)` answers one call; `RECALL_TOOL` is the tool's OpenAI function
schema and `recall_guidance` the text the actor's memory preamble carries in retrieval mode. Modules:
`params` (validation), `scope` (what a call may read), `messages_mode`, `threads_mode`, `search_mode`,
`render` (formats), `budget` (token budgets), `tool` (schema and guidance), `run` (dispatch), `errors`.
"""

from om_core.recall.errors import RecallError, RecallInvalid, RecallNotFound, RetrievalDisabled
from om_core.recall.params import RecallParams, parse_params
from om_core.recall.run import run_recall
from om_core.recall.search_mode import Searcher
from om_core.recall.tool import RECALL_TOOL, RECALL_TOOL_NAME, recall_guidance

__all__ = [
    "RECALL_TOOL",
    "RECALL_TOOL_NAME",
    "RecallError",
    "RecallInvalid",
    "RecallNotFound",
    "RecallParams",
    "RetrievalDisabled",
    "Searcher",
    "parse_params",
    "recall_guidance",
    "run_recall",
]
