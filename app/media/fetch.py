"""The bytes behind a message's media URL: a `data:` URI, or an http(s) URL fetched with limits.

A server that fetches whatever URL it is told is a door into its user's network, so by default
a URL whose host resolves to a loopback, private, link-local or otherwise non-public address is
refused (each redirect is checked the same way); `--allow-private-media-urls` lifts that for a
trusted setup. The check and the connection use one DNS answer: the connection goes to the very
address that was checked (`_PublicOnly`), so a name that answers a public address to the check and
a private one to the connect (DNS rebinding) cannot reach the private one; and the host checked is
the one httpx parsed from the URL, the one it connects to. `file://` is refused, and `mm_file://`
(Fireworks' uploaded files) answers that this server has no Files API. Fetches are capped in size,
time and redirects.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import socket
from urllib.parse import unquote_to_bytes, urljoin

import httpx

from app.media.policy import MediaPolicy

FETCH_TIMEOUT = 10.0  # seconds for a whole fetch
MAX_REDIRECTS = 3


class MediaError(ValueError):
    """A media URL that gives no bytes, with the reason."""


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


def _is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return ip.is_global and not ip.is_multicast


def _public_addresses(host: str) -> list[str]:
    """Every address `host` resolves to, in the resolver's order; `MediaError` unless all are public."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise MediaError(f"the host {host!r} does not resolve") from None
    addresses = list(dict.fromkeys(info[4][0].split("%", 1)[0] for info in infos))
    for address in addresses:
        ip = ipaddress.ip_address(address)
        if not _is_public(ip):
            raise MediaError(f"the host {host!r} resolves to {ip}, a loopback, private or link-local address: "
                             "refused (start the server with --allow-private-media-urls to allow it)")
    if not addresses:
        raise MediaError(f"the host {host!r} does not resolve")
    return addresses


class _PublicOnly(httpx.AsyncBaseTransport):
    """Sends each request to an address it has just checked: the URL's host is resolved once, every
    address must be public, and the request goes to one of those addresses by number, with the
    URL's name kept in `Host` and as the TLS server name (SNI and certificate check). httpx would
    otherwise resolve the name again when it connects, and might get another answer."""

    def __init__(self) -> None:
        # No kept-alive connections: one made for one name must not carry a request for another
        # name on the same address, whose certificate it never checked.
        self._inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.raw_host.decode("ascii")  # the name httpx would look up (IDNA-encoded)
        addresses = await asyncio.to_thread(_public_addresses, host)
        failure: httpx.ConnectError | None = None
        for address in addresses:
            pinned = httpx.Request(request.method, request.url.copy_with(host=address), headers=request.headers,
                                   stream=request.stream, extensions={**request.extensions, "sni_hostname": host})
            try:
                return await self._inner.handle_async_request(pinned)
            except httpx.ConnectError as error:  # the next address, as a resolver-ordered connect would
                failure = error
        assert failure is not None  # `addresses` is never empty
        raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()


def _parsed(url: str) -> httpx.URL:
    """`url` as httpx will request it; `MediaError` for one it cannot (a bad host, port or IDNA label)."""
    try:
        parsed = httpx.URL(url)
        scheme, host, port = parsed.scheme, parsed.host, parsed.port  # `host` decodes IDNA labels
    except (httpx.InvalidURL, ValueError) as error:  # IDNA errors are ValueErrors
        raise MediaError(f"the URL is not valid: {error}") from None
    if scheme not in ("http", "https"):
        raise MediaError("the URL redirects to a non-http(s) URL")
    if not host:
        raise MediaError("the URL has no host")
    if port is not None and not 0 < port < 65536:
        raise MediaError(f"the URL's port {port} is not a TCP port")
    return parsed


async def _fetch(url: str, policy: MediaPolicy) -> bytes:
    try:
        transport = None if policy.allow_private else _PublicOnly()
        # trust_env=False: no proxy from the environment, which would connect in our place
        async with asyncio.timeout(FETCH_TIMEOUT), httpx.AsyncClient(trust_env=False, transport=transport) as client:
            for _ in range(MAX_REDIRECTS + 1):
                async with client.stream("GET", _parsed(url), follow_redirects=False) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
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
