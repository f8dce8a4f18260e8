"""Liveness, readiness and Prometheus metrics (no auth: probes and scrapers carry no key)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from om_api.auth import Runtime
from om_api.runtime import ApiRuntime
from om_api.schemas import CheckResult, HealthResponse, ReadinessResponse
from om_core.store.revision import SCHEMA_HEAD, stored_revision

log = logging.getLogger("om.api")

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=HealthResponse, summary="The process is up")
def healthz() -> HealthResponse:
    return HealthResponse(status="ok")


def _database(runtime: ApiRuntime) -> CheckResult:
    try:
        with runtime.db.connect() as conn:
            conn.execute(text("SELECT 1"))
        revision = stored_revision(runtime.db)
    except Exception as exc:
        return CheckResult(ok=False, detail=f"unreachable: {type(exc).__name__}")
    if revision != SCHEMA_HEAD:
        detail = f"schema at {revision}, code needs {SCHEMA_HEAD}: run `om migrate`"
        return CheckResult(ok=False, detail=detail)
    return CheckResult(ok=True, detail=f"schema {revision}")


def _broker(runtime: ApiRuntime) -> CheckResult:
    try:
        runtime.require_broker()
    except Exception as exc:
        return CheckResult(ok=False, detail=f"unreachable: {type(exc).__name__}")
    return CheckResult(ok=True)


@router.get(
    "/readyz",
    response_model=ReadinessResponse,
    responses={503: {"model": ReadinessResponse, "description": "A dependency is down"}},
    summary="The database (schema up to date) and, in celery mode, the broker are reachable",
)
def readyz(runtime: Runtime) -> JSONResponse:
    checks = {"database": _database(runtime)}
    if runtime.distributed:
        checks["broker"] = _broker(runtime)
    ready = all(c.ok for c in checks.values())
    body = ReadinessResponse(status="ready" if ready else "unavailable", checks=checks)
    return JSONResponse(status_code=200 if ready else 503, content=body.model_dump(mode="json"))


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    summary="Prometheus metrics",
)
def metrics(runtime: Runtime) -> Response:
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
