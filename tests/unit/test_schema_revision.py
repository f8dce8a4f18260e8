"""The schema revision the API checks on readiness, read without Alembic, agrees with Alembic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.script import ScriptDirectory

from om_core.store.db import make_engine
from om_core.store.migrate import alembic_config, current_revision, upgrade
from om_core.store.revision import SCHEMA_HEAD, stored_revision


def test_the_schema_head_is_the_newest_migration() -> None:
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == SCHEMA_HEAD


def test_the_stored_revision_reads_what_alembic_recorded(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'om.db'}")
    assert stored_revision(engine) is None
    upgrade(engine, "0001")
    assert stored_revision(engine) == current_revision(engine) == "0001"
    upgrade(engine)
    assert stored_revision(engine) == current_revision(engine) == SCHEMA_HEAD
    engine.dispose()


def test_the_api_loads_neither_alembic_nor_litellm() -> None:
    """Both only serve other processes (migrations, model calls); the API's memory budget has no room."""
    code = "import sys, om_api.app; print('alembic' in sys.modules, 'litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
