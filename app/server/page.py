"""The page at `/`: a chat with any served model, for a person with a browser. Static files from
the package (`app/static`, with the vendored libraries it renders Markdown with in `app/static/vendor`),
nothing fetched from elsewhere; it talks to `/v1` and the Ollama routes (`/api/ps`, `/api/pull`, ...) like
any client."""

from __future__ import annotations

import functools
from importlib import resources

from litestar import Response, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8"}
# Only this origin's scripts, styles and API; no framing by other sites
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.cache
def _file(name: str, folder: str = "") -> bytes | None:
    """A file of the page, in `app/static` or its `folder` (None for any name that is not one)."""
    if "/" in name or name.startswith(".") or not name.endswith(tuple(MEDIA_TYPES)):
        return None
    static = resources.files("app") / "static"
    path = (static / folder if folder else static) / name
    return path.read_bytes() if path.is_file() else None


def _serve(name: str, folder: str = "") -> Response:
    content = _file(name, folder)
    if content is None:
        raise NotFoundException(f"no file {name!r} here")
    suffix = name[name.rindex("."):]
    return Response(content, media_type=MEDIA_TYPES[suffix], headers=PAGE_HEADERS)


@get("/", include_in_schema=False)
async def page() -> Response:
    return _serve("index.html")


@get("/static/{name:str}", include_in_schema=False)
async def page_file(name: FromPath[str]) -> Response:
    return _serve(name)


@get("/static/vendor/{name:str}", include_in_schema=False)
async def vendor_file(name: FromPath[str]) -> Response:
    return _serve(name, "vendor")


ROUTES = [page, page_file, vendor_file]
