"""The status page: ``GET /`` and its two static files, served by the API's app.

Static files only (``page/``: HTML, hand-written JavaScript, CSS; no build step, no CDN).
They hold no data and no secret: the page asks the API for everything with the token
the operator types, which stays in the tab's ``sessionStorage`` and travels only in the
``Authorization`` header. Without a valid token the page shows the login form and
nothing else. A strict Content-Security-Policy allows only this origin's script, style
and API.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

ASSETS = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def page_routes() -> list[Route]:
    """``GET /`` (the page) and ``GET /page/app.js`` / ``/page/style.css``: no token
    needed, none held."""
    folder = resources.files(__package__).joinpath("page")
    files = {name: folder.joinpath(name).read_bytes() for name in ASSETS}

    def serve(name: str) -> Response:
        return Response(files[name], media_type=ASSETS[name], headers=HEADERS)

    async def index(request: Request) -> Response:
        return serve("index.html")

    async def script(request: Request) -> Response:
        return serve("app.js")

    async def style(request: Request) -> Response:
        return serve("style.css")

    return [
        Route("/", index, methods=["GET"]),
        Route("/page/app.js", script, methods=["GET"]),
        Route("/page/style.css", style, methods=["GET"]),
    ]
