"""Swagger UI and ReDoc from vendored files (no CDN): /docs and /redoc."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

router = APIRouter(include_in_schema=False)


def static_files() -> StaticFiles:
    return StaticFiles(directory=STATIC_DIR)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="spoolmq API",
        swagger_js_url="/static/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url="/static/swagger-ui/swagger-ui.css",
        swagger_favicon_url="/static/swagger-ui/favicon-32x32.png",
    )


# ReDoc's side menu always shows a logo from its vendor's CDN; the page's policy refuses it
# (the link text stays), so the API docs never reach outside the server.
REDOC_POLICY = "img-src 'self' data:"


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    page = get_redoc_html(
        openapi_url="/openapi.json",
        title="spoolmq API",
        redoc_js_url="/static/redoc/redoc.standalone.js",
        redoc_favicon_url="/static/swagger-ui/favicon-32x32.png",
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = REDOC_POLICY
    return page
