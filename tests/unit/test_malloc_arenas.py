"""`om serve` and `om worker` cap glibc's malloc arenas unless the environment chose a value."""

from __future__ import annotations

import subprocess
import sys

CHECK = "from om_core.process.malloc_arenas import cap_malloc_arenas; print(cap_malloc_arenas())"


def run(env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, env=env
    ).stdout.strip()


def test_the_cap_applies_on_glibc() -> None:
    import platform

    assert platform.libc_ver()[0] == "glibc", "the deployment targets (and this machine) run glibc"
    assert run({"PATH": "/usr/bin:/bin"}) == "True"


def test_an_explicit_malloc_arena_max_wins() -> None:
    assert run({"PATH": "/usr/bin:/bin", "MALLOC_ARENA_MAX": "4"}) == "False"
