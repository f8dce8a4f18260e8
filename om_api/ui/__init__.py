"""The memory dashboard: a static single-page app served under `/ui`.

The page is plain HTML, CSS and ES modules shipped as package data (`static/`), so there is no build step
and nothing is fetched from the internet at run time. It holds no data of its own: the browser calls the
public `/v1` API with the key the user signs in with, exactly as any client would, so the dashboard can
show a tenant nothing the tenant's key could not read already. That is also why the files need no key:
they are the same for everyone.

Every response of the mount carries a strict Content-Security-Policy (scripts, styles and connections to
this origin only, no inline script, no framing): observation text and messages are user-controlled, and
the scripts never render them as HTML (textContent only), so the policy is a second wall, not the first.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

STATIC = Path(__file__).resolve().parent / "static"

#: Applied to every file the mount serves (see the module docstring).
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    # The files change with the package: revalidate on every load, never show a stale app.
    (b"cache-control", b"no-cache"),
)


class DashboardFiles(StaticFiles):
    """`StaticFiles` with the dashboard's security and caching headers on every response."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = headers + list(SECURITY_HEADERS)
            await send(message)

        await super().__call__(scope, receive, with_headers)


def mount(app: FastAPI) -> None:
    """Serve the dashboard at `/ui/` (`/ui` redirects there, so relative module paths resolve)."""

    @app.api_route("/ui", methods=["GET", "HEAD"], include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse("ui/", status_code=307)

    app.mount("/ui", DashboardFiles(directory=STATIC, html=True), name="ui")
