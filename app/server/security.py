"""Who may talk to the server: API keys, the bind address check, CORS and the body size limit.

A desktop server is reachable by every program on the machine and, through the browser, by every
web page the person opens. So: loopback by default, a bearer key when asked for (and required before
listening anywhere else), no CORS unless origins are named, and a cap on what one request may make
us hold in memory. Everything is decided once at start-up into `SecuritySettings`, with the bind
address check and the command line's options (`app.settings.security`); the request path,
here, only reads it.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from typing import TYPE_CHECKING

from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.middleware import DefineMiddleware
from litestar.types import Guard

from app.pipeline.errors import ApiError
from app.settings.security import SecuritySettings, key_digest

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers import BaseRouteHandler
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

# Paths answered without a key even when keys are set: the one place to extend (a liveness probe
# must work without secrets). Everything else, /openapi.json and /metrics included, needs the key.
OPEN_PATHS: frozenset[str] = frozenset({"/health"})
# The page at `/` and its files hold no secret: a browser must load them to be asked for the key.
# Only their GETs are open (`POST /` is TGI's generate route).
OPEN_PAGE_PATHS: frozenset[str] = frozenset({"/"})
OPEN_PAGE_PREFIX = "/static/"


# --- API keys --------------------------------------------------------------------------------

def key_matches(presented: str, digests: Iterable[bytes]) -> bool:
    """Constant time: every configured key is compared (no early exit), on fixed-length digests,
    so timing tells neither which key nor how much of one matched."""
    candidate = key_digest(presented)
    matched = False
    for digest in digests:
        matched |= hmac.compare_digest(candidate, digest)
    return matched


class InvalidApiKey(ApiError):
    """401 as OpenAI answers it, with the challenge header RFC 6750 asks for."""

    status_code = 401

    def __init__(self, message: str):
        super().__init__(message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


MISSING_KEY = ("You didn't provide an API key. You need to provide your API key in an Authorization "
               "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
WRONG_KEY = "Incorrect API key provided."


def bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>` (scheme case-insensitive), else None."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def is_open_path(path: str, method: str = "POST") -> bool:
    if method in ("GET", "HEAD") and (path in OPEN_PAGE_PATHS or path.startswith(OPEN_PAGE_PREFIX)):
        return True
    return (path.rstrip("/") or "/") in OPEN_PATHS


def api_key_guards(settings: SecuritySettings) -> list[Guard]:
    """The app-level guard list: empty without keys. A guard (rather than a middleware) runs after
    routing and before the handler reads the body, and raises a typed error that the app renders
    in one place, inside any middleware (so a CORS-allowed page can read the 401)."""
    if not settings.api_keys:
        return []
    digests = settings.key_digests

    def require_api_key(connection: ASGIConnection, _: BaseRouteHandler) -> None:
        if is_open_path(connection.scope["path"], connection.scope.get("method", "GET")):
            return
        # Anthropic's clients send the key as `x-api-key`; either header is accepted anywhere
        token = bearer_token(connection.headers.get("authorization")) or connection.headers.get("x-api-key") or None
        if token is None:
            raise InvalidApiKey(MISSING_KEY)
        if not key_matches(token, digests):
            raise InvalidApiKey(WRONG_KEY)

    return [require_api_key]


# --- CORS ------------------------------------------------------------------------------------

CORS_METHODS = "GET, POST, DELETE, OPTIONS"  # DELETE: /v1/responses/{id}, /api/delete
CORS_DEFAULT_HEADERS = "authorization, content-type"
CORS_MAX_AGE = "600"


class CorsMiddleware:
    """CORS for an allow-list of exact origins, and nothing for anyone else.

    Litestar's own CORS middleware adds `Access-Control-Allow-Methods/Headers` to every response that
    carries an Origin, allowed or not, and matches origins with wildcards; this one adds headers only
    for allowed origins. Preflights of allowed origins are answered here, before the API key guard
    (browsers never send credentials on a preflight); everything else goes on to the app. No
    `Allow-Credentials`: the key travels in a header the page sets, not in cookies.
    """

    def __init__(self, app: ASGIApp, origins: frozenset[str]):
        self.app = app
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers.from_scope(scope)
        origin = headers.get("origin")
        if origin is None or origin.lower() not in self.origins:
            await self.app(scope, receive, send)
        elif scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(origin, headers, send)
        else:
            await self.app(scope, receive, self._with_cors_headers(origin, send))

    @staticmethod
    async def _preflight(origin: str, headers: Headers, send: Send) -> None:
        requested = headers.get("access-control-request-headers", "").strip()
        response_headers = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-methods", CORS_METHODS.encode()),
            (b"access-control-allow-headers", (requested or CORS_DEFAULT_HEADERS).encode("latin-1")),
            (b"access-control-max-age", CORS_MAX_AGE.encode()),
            (b"vary", b"Origin"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": response_headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    def _with_cors_headers(origin: str, send: Send) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableScopeHeaders.from_message(message)
                headers["Access-Control-Allow-Origin"] = origin
                headers["Access-Control-Expose-Headers"] = "*"  # perf headers, Retry-After
                headers.add("Vary", "Origin")
            await send(message)

        return wrapped


def cors_middleware(settings: SecuritySettings) -> list[DefineMiddleware]:
    """The app-level middleware list: empty when no origin is allowed (no CORS headers at all)."""
    if not settings.cors_origins:
        return []
    return [DefineMiddleware(CorsMiddleware, origins=frozenset(settings.cors_origins))]
