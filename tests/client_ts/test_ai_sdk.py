"""The AI SDK adapter (clients/ai-sdk/, `@om/ai-sdk`) with the machine's Node.js, against a real `om serve`.

Its packages (the `ai` package pinned in its package-lock) are installed once per lock, and a scratch copy
is built against a built scratch copy of the TypeScript client (its `@om/client` dependency); see
tests/support/node_packages.py. The package's node tests (clients/ai-sdk/test/) then drive `omMemory()`
through the SDK's real `generateText` / `streamText` with its own mock model (`ai/test`
MockLanguageModelV3), against the server: the turn is posted, the model's prompt is om's context (its
history and observations), the reply (streamed too, and tool calls) is stored.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.api_server import ApiServer
from tests.support.node_packages import Built, node_and_npm, node_modules, node_suite, scratch_copy

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: The node suite's test count (clients/ai-sdk/test/): fewer ran means some were skipped or lost.
MIN_NODE_TESTS = 7


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    node, npm = node_and_npm()
    scratch = tmp_path_factory.mktemp("ai-sdk")
    client = Built(node, npm, scratch_copy("typescript", scratch, node_modules(npm, "typescript")))
    modules = node_modules(npm, "ai-sdk", siblings=["typescript"])
    copy = scratch_copy("ai-sdk", scratch, modules, links={"@om/client": client.copy})
    adapter = Built(node, npm, copy, after=client)
    try:
        yield adapter
    finally:
        adapter.stop()
        client.stop()


def test_the_adapters_node_suite_passes_against_om_serve(
    built: Built, server: ApiServer, api_key: str
) -> None:
    node_suite(built, {"OM_TS_BASE_URL": server.base_url, "OM_TS_API_KEY": api_key}, minimum=MIN_NODE_TESTS)
