"""The bytes behind a message's media URL: a `data:` URI, or an http(s) URL fetched with limits.

A server that fetches whatever URL it is told is a door into its user's network, so by default
a URL whose host resolves to a loopback, private, link-local or otherwise non-public address is
refused (each redirect is checked the same way); `--allow-private-media-urls` lifts that for a
trusted setup. `file://` is refused, and `mm_file://` (Fireworks' uploaded files) answers that
this server has no Files API. Fetches are capped in size, time and redirects.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes, urljoin, urlsplit

import httpx

MAX_MEDIA_BYTES = 20 * 1024 * 1024
FETCH_TIMEOUT = 10.0  # seconds for a whole fetch
MAX_REDIRECTS = 3


class MediaError(ValueError):
    """A media URL that gives no bytes, with the reason."""


@dataclass(frozen=True)
class MediaPolicy:
    allow_private: bool = False  # fetch URLs on loopback, private and link-local addresses too
    max_bytes: int = MAX_MEDIA_BYTES


DEFAULT_MEDIA = MediaPolicy()

async def media_bytes(url: str, policy: MediaPolicy) -> bytes:
    """The bytes `url` names (see the module's docstring), or `MediaError`."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return _data_uri(url, policy.max_bytes)
    if scheme in ("http", "https"):
        return await _fetch(url, policy)
    if scheme == "mm_file":
        raise MediaError("mm_file:// names a file uploaded to Fireworks; this server has no Files API: send the "
                         "image as a data: URI or an http(s) URL")
    if scheme == "file":
        raise MediaError("file:// URLs are refused: the server does not read its own files for a request")
    raise MediaError("the URL must be a data: URI or an http(s) URL")


def _data_uri(url: str, max_bytes: int) -> bytes:
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise MediaError("the data: URI has no ',' before its data")
    if len(payload) > max_bytes * 4 // 3 + 4:
        raise MediaError(f"the data: URI holds more than {max_bytes} bytes")
    try:
        data = base64.b64decode(payload, validate=True) if header.endswith(";base64") else unquote_to_bytes(payload)
    except (binascii.Error, ValueError):
        raise MediaError("the data: URI's base64 is not valid") from None
    if not data:
        raise MediaError("the data: URI is empty")
    return data


def _public(host: str) -> None:
    """Raises `MediaError` unless every address `host` resolves to is a public one."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        raise MediaError(f"the host {host!r} does not resolve") from None
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not ip.is_global or ip.is_multicast:
            raise MediaError(f"the host {host!r} resolves to {ip}, a loopback, private or link-local address: "
                             "refused (start the server with --allow-private-media-urls to allow it)")


async def _fetch(url: str, policy: MediaPolicy) -> bytes:
    try:
        async with asyncio.timeout(FETCH_TIMEOUT), httpx.AsyncClient(trust_env=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                host = urlsplit(url).hostname
                if not host:
                    raise MediaError("the URL has no host")
                if not policy.allow_private:
                    await asyncio.to_thread(_public, host)
                async with client.stream("GET", url, follow_redirects=False) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        if urlsplit(url).scheme not in ("http", "https"):
                            raise MediaError("the URL redirects to a non-http(s) URL")
                        continue
                    if response.status_code != 200:
                        raise MediaError(f"fetching the URL answered HTTP {response.status_code}")
                    return await _body(response, policy.max_bytes)
            raise MediaError(f"the URL redirects more than {MAX_REDIRECTS} times")
    except TimeoutError:
        raise MediaError(f"fetching the URL took more than {FETCH_TIMEOUT:g} s") from None
    except httpx.HTTPError as error:
        raise MediaError(f"fetching the URL failed: {type(error).__name__}") from None


async def _body(response: httpx.Response, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise MediaError(f"the URL's content is {declared} bytes; at most {max_bytes} are read")
    data = bytearray()
    async for piece in response.aiter_bytes():
        data += piece
        if len(data) > max_bytes:
            raise MediaError(f"the URL's content is over {max_bytes} bytes; at most {max_bytes} are read")
    if not data:
        raise MediaError("the URL's content is empty")
    return bytes(data)
