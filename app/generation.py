"""Running an engine job for one HTTP request: collecting a whole answer, or streaming SSE.

Both endpoints share this; each supplies a `StreamShape` that wraps text in its own chunk type.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
from litestar.response import Stream
from litestar.types import Receive

from app.errors import ApiError, EngineFailure, ModelNotFound, TooManyRequests
from app.response_types import UsageInfo
from backends.engine import QueueFull
from backends.jobs import ChoiceFinished, GenerationJob, JobFailed, JobHandle, TextDelta
from backends.registry import ModelRegistry, ServedModel

_encoder = msgspec.json.Encoder()
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def submit(served: ServedModel, job: GenerationJob) -> JobHandle:
    try:
        return served.engine.submit(job)
    except QueueFull as full:
        raise TooManyRequests(str(full), full.retry_after) from None


def resolve_model(registry: ModelRegistry, name: str) -> ServedModel:
    served = registry.resolve(name)
    if served is None:
        raise ModelNotFound(name)
    return served


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


@dataclass
class ChoiceResult:
    parts: list[str] = field(default_factory=list)
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class UsageCounter:
    """Token counts over all choices; each prompt counts once, however many choices it has."""

    n: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    def add(self, event: ChoiceFinished) -> None:
        if event.choice % self.n == 0:
            self.prompt_tokens += event.prompt_tokens
            self.cached_tokens += event.cached_tokens
        self.completion_tokens += event.completion_tokens

    def usage(self) -> UsageInfo:
        return UsageInfo.of(self.prompt_tokens, self.completion_tokens, self.cached_tokens)


def _failure(event: JobFailed) -> ApiError:
    error = event.error
    return error if isinstance(error, ApiError) else EngineFailure(f"generation failed: {error}")


async def _cancel_when_client_leaves(handle: JobHandle, receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    handle.cancel()


async def collect(handle: JobHandle, receive: Receive) -> tuple[list[ChoiceResult], UsageInfo]:
    """Wait for every choice of a job; a client that goes away meanwhile cancels it."""
    results = [ChoiceResult() for _ in range(handle.job.choice_count)]
    counter = UsageCounter(handle.job.n)
    watcher = asyncio.create_task(_cancel_when_client_leaves(handle, receive))
    try:
        async for event in handle.events():
            if isinstance(event, TextDelta):
                if event.text:
                    results[event.choice].parts.append(event.text)
            elif isinstance(event, ChoiceFinished):
                results[event.choice].finish_reason = event.finish_reason
                counter.add(event)
            else:
                raise _failure(event)
    finally:
        watcher.cancel()
        handle.cancel()  # a no-op once finished; frees the slots if we were cancelled
    return results, counter.usage()


class StreamShape(Protocol):
    """How one endpoint wraps stream events into its chunk Structs."""

    def opening(self) -> list[Any]: ...
    def text(self, choice: int, text: str) -> list[Any]: ...
    def finished(self, choice: int, reason: str) -> list[Any]: ...
    def usage(self, usage: UsageInfo) -> Any: ...


def sse(chunk: Any) -> bytes:
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


async def stream(handle: JobHandle, shape: StreamShape, *, include_usage: bool) -> AsyncIterator[bytes]:
    """SSE lines for a job, ending with `data: [DONE]`. Leaving early cancels the job."""
    counter = UsageCounter(handle.job.n)
    try:
        for chunk in shape.opening():
            yield sse(chunk)
        async for event in handle.events():
            if isinstance(event, TextDelta):
                if event.text:
                    for chunk in shape.text(event.choice, event.text):
                        yield sse(chunk)
            elif isinstance(event, ChoiceFinished):
                counter.add(event)
                for chunk in shape.finished(event.choice, event.finish_reason):
                    yield sse(chunk)
            else:
                yield sse(_failure(event).body())
                yield DONE
                return
        if include_usage:
            yield sse(shape.usage(counter.usage()))
        yield DONE
    finally:
        handle.cancel()


def sse_response(handle: JobHandle, shape: StreamShape, *, include_usage: bool) -> Stream:
    return Stream(
        stream(handle, shape, include_usage=include_usage),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
