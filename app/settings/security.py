"""What start-up decides about who may talk to the server, from the command line: the API keys, the
bind address check, the CORS origins and the body size limit, into `SecuritySettings`.

Apart from `app.server.security` (what the server does with them on each request) so that
`fireside serve`'s parser and its refusals (a public address without a key, a key file without
keys) run without loading the server.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.settings.sizes import format_size, parse_size

API_KEY_ENV = "FIRESIDE_API_KEY"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024


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
        object.__setattr__(self, "key_digests", tuple(key_digest(key) for key in self.api_keys))


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


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


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


# --- CORS origins ----------------------------------------------------------------------------

_ORIGIN = re.compile(r"^(https?)://([a-z0-9.\-]+|\[[0-9a-f:.]+\])(:\d{1,5})?$")


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
