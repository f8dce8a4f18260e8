"""The TypeScript client (clients/typescript/) with the machine's Node.js, against a real `om serve`.

Its packages are installed once per package-lock (`npm ci` into `.cache/ts-client-node_modules/<hash>`, a
staging folder renamed into place when complete, so concurrent or interrupted runs never share a partial
install); each run builds a scratch copy of the package with them linked in, so two runs at once do not
write the same files. Then:

- the committed `src/schema.ts` is what `npm run generate` makes of the running server's OpenAPI
  document (drift fails, naming the command that regenerates it);
- the package's own tests (`node --test`, clients/typescript/test/) pass against the server: turns,
  status, events with resume, typed errors, and retries against a local server answering 503;
- `npm pack` makes a tarball that installs into an empty project and talks to the server.

Node 20 is part of the machine; without it these tests fail (they are never skipped).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from om_core.tenancy import access
from tests.support.api_server import ApiServer, run_api_server
from tests.support.docs import fenced

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "clients" / "typescript"
CACHE = REPO / ".cache" / "ts-client-node_modules"
REGENERATE = "cd clients/typescript && npm ci && npm run generate"
NPM_CI_TIMEOUT_S = 600
#: The node suite's test count (clients/typescript/test/): fewer ran means some were skipped or lost.
MIN_NODE_TESTS = 23


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"`{name}` is not on PATH: the TypeScript client's tests need Node.js 20 with npm, which the "
            "machine's setup provides (apt-get install nodejs npm, or Node 20 from nodejs.org)",
            pytrace=False,
        )
    return found


def _run(
    command: Sequence[str],
    cwd: Path,
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(command),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"`{' '.join(command)}` in {cwd} exited with {done.returncode}:\n"
            f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}",
            pytrace=False,
        )
    return done


def _node_version(node: str) -> tuple[int, ...]:
    text = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _node_modules(npm: str) -> Path:
    """The package's dev dependencies, `npm ci` once per package-lock under `.cache/` (ignored by git)."""
    lock = (PACKAGE / "package-lock.json").read_bytes()
    folder = CACHE / hashlib.sha256(lock).hexdigest()[:12]
    if (folder / ".complete").exists():
        return folder / "node_modules"
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=CACHE))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(PACKAGE / name, staging / name)
        # --ignore-scripts: the package's own build (prepack) needs its sources, which are not here.
        _run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel", "error"],
            staging,
            timeout=NPM_CI_TIMEOUT_S,
        )
        (staging / ".complete").write_text("npm ci done\n")
        with contextlib.suppress(OSError):  # another run finished the same install first: use that one
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not (folder / ".complete").exists():
        pytest.fail(f"`npm ci` left no complete install in {folder}", pytrace=False)
    return folder / "node_modules"


class Built:
    """A scratch copy of clients/typescript with the cached packages linked in, built in the background
    (`npm run build`, then `npm run build:test`) while the server starts; `ready()` waits for it."""

    def __init__(self, node: str, npm: str, copy: Path) -> None:
        self.node, self.npm, self.copy = node, npm, copy
        self._log = copy.parent / "build.log"
        with open(self._log, "wb") as log:
            self._build = subprocess.Popen(
                ["sh", "-c", f"'{npm}' run build && '{npm}' run build:test"],
                cwd=copy,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> Built:
        try:
            code = self._build.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self._build.kill()
            raise
        if code != 0:
            log = self._log.read_text()[-8000:]
            pytest.fail(f"building the TypeScript client failed:\n{log}", pytrace=False)
        assert (self.copy / "dist" / "index.js").is_file() and (self.copy / "dist" / "index.d.ts").is_file()
        return self

    def stop(self) -> None:
        if self._build.poll() is None:
            self._build.kill()
            self._build.wait()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    node, npm = _tool("node"), _tool("npm")
    version = _node_version(node)
    if version < (20,):
        pytest.fail(f"Node.js {version} is too old: the TypeScript client needs Node 20", pytrace=False)
    modules = _node_modules(npm)
    copy = tmp_path_factory.mktemp("ts") / "typescript"
    shutil.copytree(
        PACKAGE, copy, ignore=shutil.ignore_patterns("node_modules", "dist", "build-test", "*.tgz")
    )
    (copy / "node_modules").symlink_to(modules, target_is_directory=True)
    build = Built(node, npm, copy)
    try:
        yield build
    finally:
        build.stop()


@pytest.fixture(scope="module")
def server(
    postgres_url: str, redis_url: str, pg_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """`om serve` as production starts it, with keys auth, the inline executor and the offline model."""
    log_dir = tmp_path_factory.mktemp("api")
    with run_api_server(postgres_url, redis_url, log_dir, om_serve=True) as api:
        yield api


@pytest.fixture(scope="module")
def api_key(pg_engine: Engine) -> str:
    tenant = f"tenant-ts-{os.urandom(4).hex()}"
    return access.create_key(pg_engine, tenant, "ts-client").secret


def test_committed_types_are_generated_from_the_servers_openapi_document(
    built: Built, server: ApiServer, tmp_path: Path
) -> None:
    document = httpx.get(f"{server.base_url}/openapi.json", timeout=30).raise_for_status().json()
    saved = tmp_path / "openapi.json"
    saved.write_text(json.dumps(document))
    fresh = tmp_path / "schema.ts"
    _run(
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
    built.ready()
    started = time.monotonic()
    done = subprocess.run(
        [built.node, "--test", "--test-reporter=tap", "build-test/"],
        cwd=built.copy,
        env={**os.environ, "OM_TS_BASE_URL": server.base_url, "OM_TS_API_KEY": api_key},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = f"{done.stdout[-12000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"node --test failed ({time.monotonic() - started:.0f} s):\n{output}"
    counts = {key: int(value) for key, value in re.findall(r"^# (\w+) (\d+)$", done.stdout, re.MULTILINE)}
    assert counts.get("fail") == 0 and counts.get("skipped") == 0, output
    assert counts.get("pass", 0) >= MIN_NODE_TESTS and counts.get("pass") == counts.get("tests"), output


def docs_example() -> str:
    """The docs' TypeScript example (the one `ts` block, in docs/guide/backend.md): written so it is also
    plain JavaScript."""
    (example,) = [text for _, text in fenced("ts")]
    return example


def test_the_docs_example_type_checks_and_runs_with_the_packed_client(
    built: Built, server: ApiServer, api_key: str, tmp_path: Path
) -> None:
    """What a TypeScript backend does: install the tarball built from the repository (`npm pack`), then
    compile and run the docs' example against the server."""
    built.ready()
    packed = _run(
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
    _run(install, project, timeout=120)
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
    _run([built.node, str(built.copy / "node_modules" / "typescript" / "bin" / "tsc")], project, timeout=120)
    (project / "example.mjs").write_text('const myModel = async (messages) => "Welcome, Dana";\n' + example)
    done = _run([built.node, "example.mjs"], project, timeout=60)
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(r"\d+ of \d+", lines[0]), done.stdout
    assert any(re.fullmatch(r"\d+ data-om-status", line) for line in lines[1:-1]), done.stdout
    assert lines[-1] == "true thread_not_found", done.stdout
