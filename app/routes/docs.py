"""Swagger UI and ReDoc from vendored files (no CDN): /docs and /redoc; and the icon browsers
ask every server for, /favicon.ico."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import FileResponse, HTMLResponse
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
FAVICON: Final = STATIC_DIR / "favicon.svg"

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


# ReDoc's side menu always shows a logo from its vendor's CDN: redoc-local-only.js, loaded
# first, keeps the page from asking for it, and the page's policy refuses any image from
# elsewhere all the same.
REDOC_POLICY: Final = "img-src 'self' data:"
REDOC_PAGE: Final = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>spoolmq API</title>
<link rel="icon" type="image/svg+xml" href="/static/favicon.svg">
<style>body { margin: 0; padding: 0; }</style>
</head>
<body>
<noscript>ReDoc needs JavaScript to show the API documentation.</noscript>
<redoc spec-url="/openapi.json"></redoc>
<script src="/static/redoc-local-only.js"></script>
<script src="/static/redoc/redoc.standalone.js"></script>
</body>
</html>
"""


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    return HTMLResponse(REDOC_PAGE, headers={"Content-Security-Policy": REDOC_POLICY})


@router.get("/favicon.ico")
async def favicon() -> FileResponse:
    """The server's icon (an SVG: browsers read it whatever the name says)."""
    return FileResponse(FAVICON, media_type="image/svg+xml")
