"""Schemathesis against the server's own OpenAPI document: generated valid and invalid requests to every
operation (with a real key) must get no 5xx and only documented statuses, content types and bodies.

The live event stream is left out: with `follow=true` it never ends, which a request-per-case fuzzer reads
as a hang; its replay and errors are covered in test_api_events.py. Bounded to about a minute by the
number of examples per operation; `OM_SCHEMATHESIS_SEED` picks another seed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.api_server import ApiServer, api_server, tenant_key

__all__ = ["api_server", "tenant_key"]  # fixtures used below

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def _schemathesis() -> str:
    found = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    if found is None:
        pytest.fail("schemathesis is not installed: pip install schemathesis (dev extras)", pytrace=False)
    return found


def test_generated_requests_get_no_server_error_and_match_the_schema(
    api_server: ApiServer, tenant_key: str, tmp_path: Path
) -> None:
    seed = os.environ.get("OM_SCHEMATHESIS_SEED", "1")
    command = [
        _schemathesis(),
        "run",
        f"{api_server.base_url}/openapi.json",
        "--header",
        f"Authorization: Bearer {tenant_key}",
        "--checks",
        CHECKS,
        "--exclude-path-regex",
        "/events$",
        "--max-examples",
        "12",
        "--workers",
        "1",  # several workers trip a CPython 3.11 ast bug inside hypothesis, not our server
        "--seed",
        seed,
        "--request-timeout",
        "30",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    tail = "\n".join(run.stdout.splitlines()[-80:])
    assert run.returncode == 0, f"schemathesis found problems (seed {seed}):\n{tail}\n{run.stderr[-2000:]}"
    assert "passed" in run.stdout
