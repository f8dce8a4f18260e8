"""The uvicorn factory: `uvicorn --factory om_api.asgi:create_app_from_env`.

A module of its own, importing nothing at the top, so the token encoding loads before the API's imports,
as `om serve` does (`TiktokenEstimator.load`: the later imports reuse the memory its loading frees).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["create_app_from_env"]


def create_app_from_env() -> FastAPI:
    """The API with its settings from the environment, as `om serve` builds it (which is leaner still: it
    also caps the malloc arenas and freezes the start-up heap)."""
    from om_core.tokens import default_estimator

    default_estimator().load()  # first, before the API's imports, as `om serve` does
    from om_api.app import create_app

    return create_app()
