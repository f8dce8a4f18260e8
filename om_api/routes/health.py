"""Liveness, readiness and Prometheus metrics. Probes carry no key; a scraper carries the operator's scrape
token (`OM_METRICS_TOKEN`), never a tenant's key (`om_api.metrics.require_scrape_token`)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from om_api.auth import Runtime
from om_api.metrics import require_scrape_token
from om_api.runtime import ApiRuntime
from om_api.schemas import CheckResult, ErrorResponse, HealthResponse, ReadinessResponse
from om_core.store.revision import SCHEMA_HEAD, stored_revision

log = logging.getLogger("om.api")

router = APIRouter(tags=["operations"])

_WRONG_TOKEN = "The scrape token (OM_METRICS_TOKEN) is missing or wrong"
_NOT_HERE = "No scrape token is configured: metrics are not served on the API port"


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
        runtime.require_broker(fresh=True)
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
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        401: {"model": ErrorResponse, "description": _WRONG_TOKEN},
        404: {"model": ErrorResponse, "description": _NOT_HERE},
    },
    summary="Prometheus metrics, for a scraper holding the operator's scrape token",
)
def metrics(runtime: Runtime, request: Request) -> Response:
    require_scrape_token(runtime.settings, request.headers.get("authorization"))
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
