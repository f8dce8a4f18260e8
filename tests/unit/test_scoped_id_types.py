"""mypy refuses a public id where a stored id belongs, and the reverse (`om_core.tenancy.scoped_ids`).

The two kinds of thread and resource id are both `str` at run time; what keeps a stored id (which holds the
tenant's name) from reaching a client, and a public id from being used as a storage key, is that mypy
--strict sees two types. These tests run mypy, with the project's configuration, on small snippets: the
explicit conversions pass, each mix is reported.

The snippets import a copy of `scoped_ids.py` (a module importing only `typing`), so mypy checks the
real definitions without analysing the whole of `om_core` through its package `__init__`: a few seconds.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
SCOPED_IDS = ROOT / "om_core" / "tenancy" / "scoped_ids.py"

HEADER = """
from scoped_ids import PublicId, StoredId, public_id, scoped_id, tenant_of

def read_thread(stored: StoredId) -> None: ...
def reply_with(public: PublicId) -> None: ...
"""


def mypy_errors(tmp_path: Path, body: str) -> list[str]:
    """mypy's error lines for the snippet `body`, under the project's configuration (strict)."""
    shutil.copyfile(SCOPED_IDS, tmp_path / "scoped_ids.py")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(HEADER + textwrap.dedent(body))
    out, err, _ = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-error-summary",
            str(snippet),
        ]
    )
    assert not err, err
    return [line for line in out.splitlines() if ": error:" in line]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every snippet below in one mypy run (one start-up), its errors by the snippet's name."""
    cases = {
        "converted": """
            def ok(tenant: str | None, raw: str) -> None:
                public = PublicId(raw)
                stored = scoped_id(tenant, public)
                read_thread(stored)
                reply_with(public_id(stored))
                tenant_of(stored)
        """,
        "public_as_stored": """
            def mixed(tenant: str | None, raw: str) -> None:
                read_thread(PublicId(raw))
        """,
        "stored_as_public": """
            def mixed(tenant: str | None, raw: str) -> None:
                reply_with(scoped_id(tenant, PublicId(raw)))
        """,
        "plain_str_as_stored": """
            def mixed(raw: str) -> None:
                public_id(raw)
        """,
        "stored_to_scoped_id": """
            def mixed(tenant: str | None, stored: StoredId) -> None:
                scoped_id(tenant, stored)
        """,
    }
    root = tmp_path_factory.mktemp("mypy")
    body = "".join(
        f"\n# case: {name}\n{textwrap.dedent(code).replace('def ', f'def {name}_', 1)}"
        for name, code in cases.items()
    )
    errors = mypy_errors(root, body)
    lines = (HEADER + body).splitlines()
    by_case: dict[str, list[str]] = {name: [] for name in cases}
    for error in errors:
        number = int(error.split(":")[1])
        case = next(
            line.removeprefix("# case: ") for line in reversed(lines[:number]) if line.startswith("# case: ")
        )
        by_case[case].append(error)
    return by_case


def test_explicit_conversions_pass(checked: dict[str, list[str]]) -> None:
    assert checked["converted"] == []


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("public_as_stored", '"PublicId"; expected "StoredId"'),
        ("stored_as_public", '"StoredId"; expected "PublicId"'),
        ("plain_str_as_stored", '"str"; expected "StoredId"'),
        ("stored_to_scoped_id", '"StoredId"; expected "PublicId"'),
    ],
)
def test_mypy_reports_an_id_of_the_wrong_kind(checked: dict[str, list[str]], case: str, message: str) -> None:
    [error] = checked[case]
    assert "[arg-type]" in error and message in error, error
