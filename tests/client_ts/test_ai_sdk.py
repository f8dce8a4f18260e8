"""The AI SDK adapter (clients/ai-sdk/, `@om/ai-sdk`) with the machine's Node.js, against a real `om serve`.

Its packages (the `ai` package pinned in its package-lock) are installed once per lock, and a scratch copy
is built against a built scratch copy of the TypeScript client (its `@om/client` dependency); see
tests/support/node_packages.py. The package's node tests (clients/ai-sdk/test/) then drive `omMemory()`
through the SDK's real `generateText` / `streamText` with its own mock model (`ai/test`
MockLanguageModelV3), against the server: the turn is posted, the model's prompt is om's context (its
history and observations), the reply (streamed too, and tool calls) is stored.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from tests.support.api_server import ApiServer
from tests.support.docs import fenced
from tests.support.node_packages import Built, node_modules, node_suite, run, scratch_copy

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

#: The node suite's test count (clients/ai-sdk/test/): fewer ran means some were skipped or lost.
MIN_NODE_TESTS = 8


@pytest.fixture(scope="module")
def built(ts_client: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Built against the TypeScript client's scratch copy (conftest.py's, shared with its own tests)."""
    modules = node_modules(ts_client.npm, "ai-sdk", siblings=["typescript"])
    scratch = tmp_path_factory.mktemp("ai-sdk")
    copy = scratch_copy("ai-sdk", scratch, modules, links={"@om/client": ts_client.copy})
    adapter = Built(ts_client.node, ts_client.npm, copy, after=ts_client)
    try:
        yield adapter
    finally:
        adapter.stop()


def test_the_adapters_node_suite_passes_against_om_serve(
    built: Built, server: ApiServer, api_key: str
) -> None:
    node_suite(built, {"OM_TS_BASE_URL": server.base_url, "OM_TS_API_KEY": api_key}, minimum=MIN_NODE_TESTS)


#: What the docs' example gets as `yourModel`: the SDK's mock model, answering a generate and a stream call.
MOCK_MODEL = """import { MockLanguageModelV3 } from "ai/test";
import { simulateReadableStream } from "ai";
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};
const yourModel = new MockLanguageModelV3({
  doGenerate: async () => ({
    content: [{ type: "text", text: "Welcome, Dana!" }],
    finishReason: { unified: "stop", raw: "stop" },
    usage,
    warnings: [],
  }),
  doStream: async (options) => ({
    stream: simulateReadableStream({
      chunks: [
        { type: "text-start", id: "1" },
        {
          type: "text-delta",
          id: "1",
          delta: JSON.stringify(options.prompt).includes("Porto") ? "Porto" : "?",
        },
        { type: "text-end", id: "1" },
        { type: "finish", finishReason: { unified: "stop", raw: "stop" }, usage },
      ],
    }),
  }),
});
"""


def docs_example() -> str:
    """The docs' AI SDK example (the `ts` block with `omMemory`, in docs/guide/ai-sdk.md)."""
    (example,) = [text for _, text in fenced("ts") if "omMemory" in text]
    return example


def test_the_docs_example_type_checks_and_runs(built: Built, server: ApiServer, api_key: str) -> None:
    """The example compiles (strict) and runs inside the built package (it imports `@om/ai-sdk` by name),
    with the mock model as `yourModel`; its second answer comes from om's memory of the first turn, and
    the thread holds both turns."""
    built.ready()
    thread = f"ai-docs-{os.urandom(5).hex()}"
    example = MOCK_MODEL + docs_example().replace('"t-46"', f'"{thread}"')
    (built.copy / "example.ts").write_text(example)
    tsc = str(built.copy / "node_modules" / "typescript" / "bin" / "tsc")
    strict = ["--noEmit", "--strict", "--skipLibCheck", "--target", "es2022", "--module", "nodenext"]
    run([built.node, tsc, *strict, "--types", "node", "example.ts"], built.copy, timeout=120)
    (built.copy / "example.mjs").write_text(example)
    env = {"OM_BASE_URL": server.base_url, "OM_API_KEY": api_key}
    done = run([built.node, "example.mjs"], built.copy, timeout=60, env=env)
    assert done.stdout.splitlines() == ["Welcome, Dana!", "Porto"], done.stdout
    headers = {"authorization": f"Bearer {api_key}"}
    stored = httpx.get(f"{server.base_url}/v1/threads/{thread}/messages", headers=headers, timeout=30)
    roles = [m["role"] for m in stored.raise_for_status().json()["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"], stored.text
