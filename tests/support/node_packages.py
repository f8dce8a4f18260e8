"""The repository's Node packages (clients/typescript, clients/ai-sdk) for the tests that build and run them.

Each package's dependencies are installed once per package-lock (`npm ci` into
`.cache/node_modules/<package>/<hash>`, a staging folder renamed into place when complete, so concurrent or
interrupted runs never share a partial install). A test builds a scratch copy of the package with them
linked in, so two runs at once never write the same files; a package that depends on another of the
repository's (`"@om/client": "file:../typescript"`) gets that one's built scratch copy linked instead.

Node 20 is part of the machine; without it these tests fail (they are never skipped).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"
CACHE = REPO / ".cache" / "node_modules"
NPM_CI_TIMEOUT_S = 600


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"`{name}` is not on PATH: the TypeScript packages' tests need Node.js 20 with npm, which the "
            "machine's setup provides (apt-get install nodejs npm, or Node 20 from nodejs.org)",
            pytrace=False,
        )
    return found


def node_and_npm() -> tuple[str, str]:
    """The machine's `node` and `npm`, failing the test when missing or older than Node 20."""
    node, npm = tool("node"), tool("npm")
    text = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    version = tuple(int(part) for part in re.findall(r"\d+", text)[:3])
    if version < (20,):
        pytest.fail(f"Node.js {version} is too old: the TypeScript packages need Node 20", pytrace=False)
    return node, npm


def run(
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


def node_modules(npm: str, package: str, siblings: Sequence[str] = ()) -> Path:
    """clients/<package>'s dependencies, `npm ci` once per package-lock under `.cache/` (ignored by git).

    `siblings` are the other clients/ packages it links (`file:../<sibling>`): their package.json is laid
    beside it so npm can read them; the scratch copy links their built copies instead."""
    source = CLIENTS / package
    digest = hashlib.sha256((source / "package-lock.json").read_bytes())
    for sibling in siblings:
        digest.update((CLIENTS / sibling / "package.json").read_bytes())
    folder = CACHE / package / digest.hexdigest()[:12]
    if (folder / ".complete").exists():
        return folder / package / "node_modules"
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=folder.parent))
    try:
        for name, files in [(package, ("package.json", "package-lock.json"))] + [
            (sibling, ("package.json",)) for sibling in siblings
        ]:
            (staging / name).mkdir()
            for file in files:
                shutil.copyfile(CLIENTS / name / file, staging / name / file)
        # --ignore-scripts: the package's own build (prepack) needs its sources, which are not here.
        run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel", "error"],
            staging / package,
            timeout=NPM_CI_TIMEOUT_S,
        )
        (staging / ".complete").write_text("npm ci done\n")
        with contextlib.suppress(OSError):  # another run finished the same install first: use that one
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not (folder / ".complete").exists():
        pytest.fail(f"`npm ci` left no complete install in {folder}", pytrace=False)
    return folder / package / "node_modules"


def scratch_copy(package: str, into: Path, modules: Path, links: Mapping[str, Path] | None = None) -> Path:
    """A copy of clients/<package> in `into` with `modules` as its node_modules; `links` (a package name
    such as `@om/client` to a folder) replace entries of it."""
    copy = into / package
    shutil.copytree(
        CLIENTS / package, copy, ignore=shutil.ignore_patterns("node_modules", "dist", "build-test", "*.tgz")
    )
    if not links:
        (copy / "node_modules").symlink_to(modules, target_is_directory=True)
        return copy
    own = copy / "node_modules"
    own.mkdir()
    for entry in modules.iterdir():
        if entry.name.startswith("@"):
            (own / entry.name).mkdir()
            for inner in entry.iterdir():
                (own / entry.name / inner.name).symlink_to(inner.resolve())
        else:
            (own / entry.name).symlink_to(entry.resolve())
    for name, target in links.items():
        link = own / name
        if link.is_symlink():
            link.unlink()
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)
    return copy


class Built:
    """A scratch copy of a package built in the background (`npm run build`, then `npm run build:test`)
    while the server starts; `ready()` waits for it."""

    def __init__(self, node: str, npm: str, copy: Path, *, after: Built | None = None) -> None:
        self.node, self.npm, self.copy = node, npm, copy
        self._after = after
        self._log = copy.parent / f"build-{copy.name}.log"
        self._build: subprocess.Popen[bytes] | None = None
        if after is None:
            self._start()

    def _start(self) -> None:
        with open(self._log, "wb") as log:
            self._build = subprocess.Popen(
                ["sh", "-c", f"'{self.npm}' run build && '{self.npm}' run build:test"],
                cwd=self.copy,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def ready(self) -> Built:
        if self._after is not None:  # it compiles against the other package's build: that one first
            self._after.ready()
            self._after = None
            self._start()
        assert self._build is not None
        try:
            code = self._build.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self._build.kill()
            raise
        if code != 0:
            log = self._log.read_text()[-8000:]
            pytest.fail(f"building {self.copy.name} failed:\n{log}", pytrace=False)
        assert (self.copy / "dist" / "index.js").is_file() and (self.copy / "dist" / "index.d.ts").is_file()
        return self

    def stop(self) -> None:
        if self._build is not None and self._build.poll() is None:
            self._build.kill()
            self._build.wait()


def node_suite(built: Built, env: Mapping[str, str], *, minimum: int, timeout: float = 180) -> None:
    """`node --test` on the package's compiled tests: every one passes, none skipped, at least `minimum`
    ran (fewer means some were lost)."""
    built.ready()
    done = subprocess.run(
        [built.node, "--test", "--test-reporter=tap", "build-test/"],
        cwd=built.copy,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = f"{done.stdout[-12000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"node --test failed in {built.copy.name}:\n{output}"
    counts = {key: int(value) for key, value in re.findall(r"^# (\w+) (\d+)$", done.stdout, re.MULTILINE)}
    assert counts.get("fail") == 0 and counts.get("skipped") == 0, output
    assert counts.get("pass", 0) >= minimum and counts.get("pass") == counts.get("tests"), output
