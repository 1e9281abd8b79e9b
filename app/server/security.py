"""Who may talk to the server: API keys, the bind address check, CORS and the body size limit.

A desktop server is reachable by every program on the machine and, through the browser, by every
web page the person opens. So: loopback by default, a bearer key when asked for (and required before
listening anywhere else), no CORS unless origins are named, and a cap on what one request may make
us hold in memory. Everything is decided once at start-up into `SecuritySettings`; the request
path only reads it.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from litestar import Request, Response
from litestar.datastructures import Headers, MutableScopeHeaders
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.middleware import DefineMiddleware
from litestar.types import Guard

from app.server.errors import ApiError, ErrorBody, ErrorResponse
from app.sizes import format_size, parse_size

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection
    from litestar.handlers import BaseRouteHandler
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

API_KEY_ENV = "FIRESIDE_API_KEY"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024

# Paths answered without a key even when keys are set: the one place to extend (a liveness probe
# must work without secrets). Everything else, /openapi.json and /metrics included, needs the key.
OPEN_PATHS: frozenset[str] = frozenset({"/health"})
# The page at `/` and its files hold no secret: a browser must load them to be asked for the key.
# Only their GETs are open (`POST /` is TGI's generate route).
OPEN_PAGE_PATHS: frozenset[str] = frozenset({"/"})
OPEN_PAGE_PREFIX = "/static/"


class SecurityConfigError(Exception):
    """A start-up setting that would leave the server open or cannot be read (exit code 2)."""


@dataclass(frozen=True)
class SecuritySettings:
    api_keys: tuple[str, ...] = ()  # any of them is accepted; none: no authentication
    cors_origins: tuple[str, ...] = ()  # exact origins (scheme://host[:port]); none: no CORS headers
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # sha256 of each key, so that comparisons run over equal lengths whatever the caller sends
    key_digests: tuple[bytes, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_digests", tuple(_digest(key) for key in self.api_keys))


def _size_argument(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# --- API keys --------------------------------------------------------------------------------

def _check_key(key: str, where: str) -> str:
    """A bearer token is one non-empty run of visible characters; anything else could never match."""
    if not key or any(ch.isspace() for ch in key) or not key.isprintable():
        raise SecurityConfigError(f"invalid API key in {where}: keys must be non-empty, without spaces")
    return key


def read_key_file(path: Path) -> list[str]:
    """One key per line; blank lines and lines starting with `#` are skipped. A file without
    keys is an error: a server believed to be locked must not start open."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise SecurityConfigError(f"cannot read API key file {path}: {error.strerror or error}") from None
    keys = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    if not keys:
        raise SecurityConfigError(f"API key file {path} holds no keys")
    return [_check_key(key, f"{path}") for key in keys]


def collect_api_keys(cli_keys: Iterable[str], key_file: Path | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Keys from `--api-key` and `--api-key-file` together; `FIRESIDE_API_KEY` only when neither
    is given, so that a key exported in the shell does not silently stay valid beside new ones."""
    keys = [_check_key(key, "--api-key") for key in cli_keys]
    if key_file is not None:
        keys += read_key_file(key_file)
    if not keys and environ.get(API_KEY_ENV, "").strip():
        keys.append(_check_key(environ[API_KEY_ENV].strip(), API_KEY_ENV))
    return tuple(dict.fromkeys(keys))


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def key_matches(presented: str, digests: Iterable[bytes]) -> bool:
    """Constant time: every configured key is compared (no early exit), on fixed-length digests,
    so timing tells neither which key nor how much of one matched."""
    candidate = _digest(presented)
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


# --- bind address ----------------------------------------------------------------------------

def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (also IPv4-mapped) and `localhost`; any other name or address is not."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def check_bind(host: str, settings: SecuritySettings, insecure: bool) -> str | None:
    """Refuse to listen beyond this machine without a key; with `--insecure`, a warning to print."""
    if is_loopback(host) or settings.api_keys:
        return None
    if not insecure:
        raise SecurityConfigError(
            f"refusing to listen on {host} without an API key: other machines could use this server. "
            f"Set --api-key, --api-key-file or {API_KEY_ENV}, bind to 127.0.0.1, "
            "or pass --insecure to allow it anyway")
    return f"warning: listening on {host} without an API key (--insecure): anyone who can reach it can use it"


# --- CORS ------------------------------------------------------------------------------------

_ORIGIN = re.compile(r"^(https?)://([a-z0-9.\-]+|\[[0-9a-f:.]+\])(:\d{1,5})?$")
CORS_METHODS = "GET, POST, DELETE, OPTIONS"  # DELETE: /v1/responses/{id}, /api/delete
CORS_DEFAULT_HEADERS = "authorization, content-type"
CORS_MAX_AGE = "600"


def normalize_origin(text: str) -> str:
    """`scheme://host[:port]` as browsers send it in `Origin` (lower case, no path). `*` and
    `null` are refused: they would let any page, or any sandboxed or file:// page, call us."""
    origin = text.strip().rstrip("/").lower()
    if not _ORIGIN.match(origin):
        raise ValueError(f"not an origin: {text!r} (expected scheme://host[:port], e.g. http://localhost:3000; "
                         "wildcards and 'null' are not allowed)")
    return origin


def _origin_argument(text: str) -> str:
    try:
        return normalize_origin(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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


# --- body size -------------------------------------------------------------------------------

def body_too_large(request: Request, _: RequestEntityTooLarge) -> Response:
    """413 in OpenAI's shape. Litestar raises it from `request.body()` before reading anything when
    Content-Length is over the limit, or as soon as a chunked upload passes it, so at most the limit
    is ever held in memory."""
    limit = request.route_handler.resolve_request_max_body_size()
    message = f"Request body too large: the limit is {format_size(limit)}." if limit else "Request body too large."
    body = ErrorResponse(ErrorBody(message, "invalid_request_error", None, "request_too_large"))
    return Response(body, status_code=413, headers={"Connection": "close"})


# --- command line ----------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("security")
    group.add_argument("--api-key", action="append", default=[], metavar="KEY",
                       help=f"require `Authorization: Bearer KEY` on the API (repeat for several; "
                            f"default: ${API_KEY_ENV} when set and no key option is given)")
    group.add_argument("--api-key-file", type=Path, default=None, metavar="PATH",
                       help="a file with one accepted key per line (# starts a comment line)")
    group.add_argument("--insecure", action="store_true",
                       help="allow listening on a non-loopback address without an API key")
    group.add_argument("--cors-origin", action="append", type=_origin_argument, default=[], metavar="ORIGIN",
                       help="let web pages from ORIGIN (e.g. http://localhost:3000) call the API; "
                            "repeat for several (default: no CORS)")
    group.add_argument("--max-body-size", type=_size_argument, default=DEFAULT_MAX_BODY_BYTES, metavar="SIZE",
                       help="largest request body, in bytes or with a unit (16MiB, 512KiB); "
                            "larger: 413 (default: 16MiB)")


def settings_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> SecuritySettings:
    environ = os.environ if environ is None else environ
    return SecuritySettings(
        api_keys=collect_api_keys(args.api_key, args.api_key_file, environ),
        cors_origins=tuple(dict.fromkeys(args.cors_origin)),
        max_body_bytes=args.max_body_size,
    )


def describe(settings: SecuritySettings) -> str:
    """One start-up line; never the keys themselves."""
    keys = len(settings.api_keys)
    auth = f"API key required ({keys} key{'s' if keys != 1 else ''})" if keys else "no API key"
    cors = f"CORS for {', '.join(settings.cors_origins)}" if settings.cors_origins else "no CORS"
    return f"{auth}; {cors}; request bodies up to {format_size(settings.max_body_bytes)}"
