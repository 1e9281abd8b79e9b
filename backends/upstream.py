"""Upstream servers: a configured model that runs on another OpenAI-compatible server (vLLM,
Fireworks, another Fireside) rather than in llama.cpp here. This module is the HTTP side: where
the server is, its key, one streamed POST, and what goes wrong on the way. `app.pipeline.upstream.answer` turns
request plans into its bodies and its answers into the engine's events.
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from asyncio import AbstractEventLoop, get_running_loop
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

# A generation may sit in the upstream's queue or prefill a long prompt for a while before its
# first byte; a server that says nothing for this long is taken as gone.
READ_TIMEOUT = 600.0
TIMEOUT = httpx.Timeout(connect=10.0, read=READ_TIMEOUT, write=60.0, pool=60.0)
# httpx logs every request at INFO: the request log's line (with `upstream=`) already tells of it
logging.getLogger("httpx").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Upstream:
    """Where a model runs: the server's OpenAI base URL (ending in `/v1`), the environment
    variable holding its bearer key, and the model's name there (None: the same id as here)."""

    url: str
    api_key_env: str | None = None
    model: str | None = None

    def endpoint(self, path: str) -> str:
        return self.url.rstrip("/") + path

    def headers(self) -> dict[str, str]:
        """The request's headers; raises UpstreamFailure when the key's variable is not set."""
        headers = {"Accept": "text/event-stream"}
        if self.api_key_env is not None:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise UpstreamFailure(503, f"the key for upstream {self.url} is missing: the environment variable "
                                           f"{self.api_key_env} (api_key_env) is not set in the server's environment")
            headers["Authorization"] = f"Bearer {key}"
        return headers


class UpstreamFailure(Exception):
    """The upstream could not be reached or answered an error: `status` as it should reach our
    client, `message` naming the upstream when the fault is not the request's."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}


# One connection pool per event loop (the server has one; tests may run several in turn).
_clients: weakref.WeakKeyDictionary[AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _client() -> httpx.AsyncClient:
    loop = get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient(timeout=TIMEOUT, follow_redirects=False)
    return client


def error_message(body: bytes) -> tuple[str | None, str | None, str | None]:
    """The message, param and code of an error body: OpenAI's `{"error": {...}}`, vLLM's
    `{"object": "error", "message"}`, a 422 `detail` list or string, or plain text."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", errors="replace").strip()
        return (text[:500] or None), None, None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            return _text(error.get("message")), _text(error.get("param")), _text(error.get("code"))
        if isinstance(error, str):
            return error, None, None
        if isinstance(data.get("message"), str):
            return data["message"], _text(data.get("param")), _text(data.get("code"))
        detail = data.get("detail")
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            loc = ".".join(str(part) for part in detail[0].get("loc", []) if part != "body")
            return (f"{loc}: {detail[0].get('msg')}" if loc else str(detail[0].get("msg"))), loc or None, None
        if isinstance(detail, str):
            return detail, None, None
    return None, None, None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def failure_of(upstream: Upstream, status: int, body: bytes, headers: httpx.Headers) -> UpstreamFailure:
    """An upstream's error answer as ours: a 4xx is the request's fault and keeps its status and
    message (a refused key says so, since our client's own key was fine); a 429 keeps its
    Retry-After; a 503 stays 503 (overloaded, try again); any other 5xx is a 502 naming it."""
    message, param, code = error_message(body)
    said = message or f"HTTP {status}"
    if status in (401, 403):
        return UpstreamFailure(status, f"upstream {upstream.url} refused the request's key "
                                       f"({upstream.api_key_env or 'no api_key_env set'}): {said}", code=code)
    if status == 429:
        retry = {"Retry-After": headers["retry-after"]} if "retry-after" in headers else {}
        return UpstreamFailure(429, said, param=param, code=code, headers=retry)
    if 400 <= status < 500:
        return UpstreamFailure(status, said, param=param, code=code)
    kept = 503 if status == 503 else 502
    return UpstreamFailure(kept, f"upstream {upstream.url} answered {status}: {said}", code="upstream_error")


def unreachable(upstream: Upstream, error: Exception) -> UpstreamFailure:
    kind = "timed out" if isinstance(error, httpx.TimeoutException) else "is unreachable"
    detail = str(error) or type(error).__name__
    return UpstreamFailure(502, f"upstream {upstream.url} {kind}: {detail}", code="upstream_unreachable")


class UpstreamStream:
    """One streamed POST: `open` sends it and waits for the status (an error answer raises
    UpstreamFailure with its body read), `events` yields the `data:` payloads as they come,
    `close` drops the connection (the upstream sees its client leave and stops generating)."""

    def __init__(self, upstream: Upstream, path: str, body: dict[str, Any]):
        self.upstream, self.path, self.body = upstream, path, body
        self._response: httpx.Response | None = None

    async def open(self) -> None:
        upstream = self.upstream
        client = _client()
        request = client.build_request("POST", upstream.endpoint(self.path), json=self.body,
                                       headers=upstream.headers())
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as error:
            raise unreachable(upstream, error) from None
        if response.status_code >= 400:
            try:
                body = await response.aread()
            except httpx.HTTPError:
                body = b""
            finally:
                await response.aclose()
            raise failure_of(upstream, response.status_code, body, response.headers)
        self._response = response

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The stream's JSON events until `[DONE]` (or the end of the body)."""
        assert self._response is not None
        try:
            async for line in self._response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # comments, `event:` lines, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    event = msgspec.json.decode(data)
                except msgspec.DecodeError:
                    raise UpstreamFailure(502, f"upstream {self.upstream.url} sent an event that is not JSON: "
                                               f"{data[:200]!r}", code="upstream_error") from None
                if isinstance(event, dict):
                    yield event
        except httpx.HTTPError as error:
            raise UpstreamFailure(502, f"upstream {self.upstream.url} broke off the answer: "
                                       f"{error or type(error).__name__}", code="upstream_error") from None

    async def close(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            await response.aclose()
