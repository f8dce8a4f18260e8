"""The TypeScript client (clients/typescript/) with the machine's Node.js, against a real `om serve`.

Its packages are installed once per package-lock and each run builds a scratch copy of the package
(tests/support/node_packages.py says how); the server and the key are tests/client_ts/conftest.py's. Then:

- the committed `src/schema.ts` is what `npm run generate` makes of the running server's OpenAPI
  document (drift fails, naming the command that regenerates it);
- the package's own tests (`node --test`, clients/typescript/test/) pass against the server: turns,
  status, events with resume, typed errors, retries against a local server answering 503, and every
  other route (working memory, config, resources, webhooks, observe/reflect, line edits, the proxy),
  the raw response of a call, and the `OM_BASE_URL` / `OM_API_KEY` defaults;
- `npm pack` makes a tarball that installs into an empty project and talks to the server.

Node 20 is part of the machine; without it these tests fail (they are never skipped).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import httpx
import pytest

from tests.support.api_server import ApiServer
from tests.support.docs import fenced
from tests.support.node_packages import (
    REPO,
    Built,
    node_suite,
    run,
)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

PACKAGE = REPO / "clients" / "typescript"
REGENERATE = "cd clients/typescript && npm ci && npm run generate"
#: The node suite's test count (clients/typescript/test/): fewer ran means some were skipped or lost.
MIN_NODE_TESTS = 25


@pytest.fixture(scope="module")
def built(ts_client: Built) -> Built:
    return ts_client


def test_committed_types_are_generated_from_the_servers_openapi_document(
    built: Built, server: ApiServer, tmp_path: Path
) -> None:
    document = httpx.get(f"{server.base_url}/openapi.json", timeout=30).raise_for_status().json()
    saved = tmp_path / "openapi.json"
    saved.write_text(json.dumps(document))
    fresh = tmp_path / "schema.ts"
    run(
        [built.node, "scripts/generate.mjs", "--from", str(saved), "--out", str(fresh)],
        built.copy,
        timeout=120,
    )
    committed = (PACKAGE / "src" / "schema.ts").read_text()
    generated = fresh.read_text()
    if generated != committed:
        diff = "".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    generated.splitlines(keepends=True),
                    "committed src/schema.ts",
                    "generated from the server",
                )
            )[:80]
        )
        pytest.fail(
            "clients/typescript/src/schema.ts is not what the server's OpenAPI document generates; "
            f"regenerate it with `{REGENERATE}` and commit it:\n{diff}",
            pytrace=False,
        )


def test_the_node_suite_passes_against_om_serve(built: Built, server: ApiServer, api_key: str) -> None:
    node_suite(built, {"OM_TS_BASE_URL": server.base_url, "OM_TS_API_KEY": api_key}, minimum=MIN_NODE_TESTS)


def docs_example() -> str:
    """The docs' TypeScript client example (the `ts` block with `new OMClient`, in docs/guide/backend.md):
    written so it is also plain JavaScript."""
    (example,) = [text for _, text in fenced("ts") if "new OMClient" in text]
    return example


def test_the_docs_example_type_checks_and_runs_with_the_packed_client(
    built: Built, server: ApiServer, api_key: str, tmp_path: Path
) -> None:
    """What a TypeScript backend does: install the tarball built from the repository (`npm pack`), then
    compile and run the docs' example against the server."""
    built.ready()
    packed = run(
        [built.npm, "pack", "--ignore-scripts", "--json", "--pack-destination", str(tmp_path)],
        built.copy,
        timeout=60,
    )
    manifest = json.loads(packed.stdout)[0]
    files = {entry["path"] for entry in manifest["files"]}
    assert {"dist/index.js", "dist/index.d.ts", "dist/schema.d.ts", "package.json"} <= files, files
    project = tmp_path / "backend"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "backend", "private": True, "type": "module"}))
    tarball = str(tmp_path / manifest["filename"])
    install = [built.npm, "install", "--offline", "--no-audit", "--no-fund", "--loglevel", "error", tarball]
    run(install, project, timeout=120)
    ids: dict[str, str] = {}
    example = docs_example().replace("http://localhost:8088", server.base_url).replace("omk_...", api_key)
    example = re.sub(  # fresh threads and resources for the docs' placeholders
        r"\b(?:t|user)-\d+\b", lambda m: ids.setdefault(m.group(), f"ts-{os.urandom(5).hex()}"), example
    )
    (project / "example.ts").write_text(
        'const myModel = async (messages: unknown[]): Promise<string> => "Welcome, Dana";\n' + example
    )
    (project / "tsconfig.json").write_text(
        json.dumps(
            {
                "compilerOptions": {
                    "target": "ES2022",
                    "module": "NodeNext",
                    "moduleResolution": "NodeNext",
                    "strict": True,
                    "noEmit": True,
                    "skipLibCheck": True,
                    "types": ["node"],
                    "typeRoots": [str(built.copy / "node_modules" / "@types")],
                },
                "files": ["example.ts"],
            }
        )
    )
    run([built.node, str(built.copy / "node_modules" / "typescript" / "bin" / "tsc")], project, timeout=120)
    (project / "example.mjs").write_text('const myModel = async (messages) => "Welcome, Dana";\n' + example)
    done = run([built.node, "example.mjs"], project, timeout=60)
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"\d+ of \d+", lines[0]), done.stdout
    assert any(re.fullmatch(r"\d+ data-om-status", line) for line in lines[1:-1]), done.stdout
    assert lines[-1] == "true thread_not_found", done.stdout
