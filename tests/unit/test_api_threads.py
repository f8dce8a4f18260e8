"""`OM_API_THREADS` bounds how many requests the API serves at once (its sync routes run on that pool)."""

from __future__ import annotations

from pathlib import Path

from anyio import to_thread
from starlette.testclient import TestClient

from om_api.app import create_app
from om_api.settings import ApiSettings


def _pool_size() -> int:
    return int(to_thread.current_default_thread_limiter().total_tokens)


def test_the_request_pool_has_the_configured_number_of_threads(tmp_path: Path) -> None:
    settings = ApiSettings(database_url=f"sqlite:///{tmp_path / 'om.db'}", auth="none", api_threads=3)
    with TestClient(create_app(settings), base_url="http://localhost") as client:
        assert client.portal is not None
        assert client.portal.call(_pool_size) == 3
        assert client.get("/healthz").status_code == 200
