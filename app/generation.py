"""Running an engine job for one HTTP request: collecting a whole answer, or streaming SSE.

Both endpoints share this; each supplies a `StreamShape` that wraps a choice's pieces in its own
chunk type. What a request asks for beyond text (logprobs, token ids, raw output, timings) is
gathered here only when asked for.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
from litestar.response import Response, Stream
from litestar.types import Receive

from app.errors import (
    ApiError,
    EngineFailure,
    ModelNotFound,
    ModelUnavailable,
    TooManyRequests,
)
from app.logprobs import Entry
from app.perf_metrics import RequestClock
from app.request_log import (
    note_error,
    note_job,
    note_model,
    note_response_id,
    output_parts,
    track,
)
from app.response_types import UsageInfo
from app.stream_buffer import BufferPolicy, ChunkBuffer, Piece
from backends.engine import QueueFull
from backends.jobs import (
    ChoiceFinished,
    GenerationJob,
    JobFailed,
    JobHandle,
    PromptLogprobs,
    TextDelta,
)
from backends.llama_model import ModelLoadError
from backends.registry import Lease, ModelRegistry, ServedModel

log = logging.getLogger("fireside.requests")

_encoder = msgspec.json.Encoder()
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def submit(served: ServedModel, job: GenerationJob) -> JobHandle:
    note_job(served, job)
    try:
        return served.engine.submit(job)
    except QueueFull as full:
        raise TooManyRequests(str(full), full.retry_after) from None


async def with_model(registry: ModelRegistry, name: str,
                     respond: Callable[[Lease], Awaitable[Response | Stream]]) -> Response | Stream:
    """`respond` under a lease on the request's model. A stream releases the lease when it ends
    (`sse_response`'s `on_close`); a whole answer releases it itself; a failure releases it here."""
    lease = await acquire_model(registry, name)
    try:
        return await respond(lease)
    except BaseException:
        lease.release()
        raise


async def acquire_model(registry: ModelRegistry, name: str) -> Lease:
    """A lease on the request's model, loading it when needed (404 for an unknown one)."""
    note_model(name)
    try:
        lease = await registry.acquire(name)
    except ModelLoadError as error:
        raise ModelUnavailable(f"model {name} could not be loaded: {error}") from None
    if lease is None:
        raise ModelNotFound(name)
    return lease


def new_id(prefix: str) -> str:
    """A response's id (the request log line shows it)."""
    response_id = f"{prefix}-{uuid.uuid4().hex}"
    note_response_id(response_id)
    return response_id


def now() -> int:
    return int(time.time())


@dataclass
class ChoiceResult:
    parts: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[Entry] = field(default_factory=list)  # only when the job computes them
    prompt_logprobs: list[Entry] | None = None  # echoed prompt positions
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
    draft_tokens: int = 0
    draft_accepted: int = 0
    finished: set[int] = field(default_factory=set)  # the choices counted from their ChoiceFinished

    def add(self, event: ChoiceFinished) -> None:
        self.finished.add(event.choice)
        if event.choice % self.n == 0:
            self.prompt_tokens += event.prompt_tokens
            self.cached_tokens += event.cached_tokens
        self.completion_tokens += event.completion_tokens
        self.draft_tokens += event.draft_tokens
        self.draft_accepted = max(self.draft_accepted, event.draft_accepted)  # choices share one prediction

    def add_unfinished(self, handle: JobHandle) -> None:
        """The choices that never finished (their client left, or the job failed): the tokens
        generated for them until then, and the prompts of those that got as far as a token (a
        job dropped from the queue cost nothing)."""
        job = handle.job
        for choice, generated in enumerate(handle.generated):
            if choice not in self.finished:
                if choice % self.n == 0 and generated:
                    self.prompt_tokens += len(job.prompts[choice // job.n].tokens)
                self.completion_tokens += generated

    def usage(self) -> UsageInfo:
        return UsageInfo.of(self.prompt_tokens, self.completion_tokens, self.cached_tokens)


def _failure(event: JobFailed) -> ApiError:
    error = event.error
    return error if isinstance(error, ApiError) else EngineFailure(f"generation failed: {error}")


def _prompt_entries(handle: JobHandle, event: PromptLogprobs) -> list[Entry]:
    prompt = handle.job.prompts[event.choice // handle.job.n].tokens
    return list(zip(prompt[event.start:], event.entries, strict=True))


async def _cancel_when_client_leaves(handle: JobHandle, receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    handle.cancel()


async def collect(handle: JobHandle, receive: Receive, clock: RequestClock) -> tuple[list[ChoiceResult], UsageCounter]:
    """Wait for every choice of a job; a client that goes away meanwhile cancels it."""
    results = [ChoiceResult() for _ in range(handle.job.choice_count)]
    counter = UsageCounter(handle.job.n)
    track(counter, clock, [result.parts for result in results])
    watcher = asyncio.create_task(_cancel_when_client_leaves(handle, receive))
    try:
        async for event in handle.events():
            if isinstance(event, TextDelta):
                result = results[event.choice]
                if event.text:
                    result.parts.append(event.text)
                if event.token >= 0:
                    result.tokens.append(event.token)
                    if event.logprob is not None:
                        result.logprobs.append((event.token, event.logprob))
            elif isinstance(event, ChoiceFinished):
                results[event.choice].finish_reason = event.finish_reason
                counter.add(event)
                if event.first_token_at is not None:
                    clock.token(event.first_token_at)
            elif isinstance(event, PromptLogprobs):
                results[event.choice].prompt_logprobs = _prompt_entries(handle, event)
            else:
                raise _failure(event)
    finally:
        watcher.cancel()
        handle.cancel()  # a no-op once finished; frees the slots if we were cancelled
        counter.add_unfinished(handle)
    clock.finish()
    return results, counter


class StreamShape(Protocol):
    """How one endpoint wraps stream events into its chunk Structs."""

    def opening(self) -> list[Any]: ...
    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[Any]: ...
    def piece(self, choice: int, piece: Piece) -> list[Any]: ...
    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[Any]: ...
    def usage(self, usage: UsageInfo) -> Any: ...


def sse(chunk: Any) -> bytes:
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


@dataclass(frozen=True)
class StreamOptions:
    include_usage: bool = True
    buffer: BufferPolicy | None = None  # coalesce chunks (`stream_options.buffer_*`)


async def stream(handle: JobHandle, shape: StreamShape, options: StreamOptions,
                 clock: RequestClock, on_close: Callable[[], None] | None = None) -> AsyncIterator[bytes]:
    """SSE lines for a job, ending with `data: [DONE]`. Leaving early cancels the job."""
    counter = UsageCounter(handle.job.n)
    buffer = ChunkBuffer(options.buffer) if options.buffer is not None else None
    remaining = handle.job.choice_count
    outputs = output_parts(remaining)  # only with --log-prompts
    track(counter, clock, outputs)
    try:
        for chunk in shape.opening():
            yield sse(chunk)
        while remaining:
            events = await handle.next_events(buffer.wait() if buffer is not None else None)
            if events is None:
                return  # cancelled
            for event in events:
                if isinstance(event, TextDelta):
                    if outputs is not None:
                        outputs[event.choice].append(event.text)
                    if buffer is None:
                        for chunk in shape.piece(event.choice, Piece.of(event)):
                            yield sse(chunk)
                    else:
                        buffer.add(event)
                elif isinstance(event, ChoiceFinished):
                    counter.add(event)
                    if event.first_token_at is not None:
                        clock.token(event.first_token_at)
                    remaining -= 1
                    if buffer is not None:
                        for chunk in _drain(shape, buffer.take(event.choice)):
                            yield sse(chunk)
                    if not remaining:
                        clock.finish()
                    for chunk in shape.finished(event.choice, event.finish_reason, not remaining, counter):
                        yield sse(chunk)
                elif isinstance(event, PromptLogprobs):
                    for chunk in shape.prompt_scored(event.choice, _prompt_entries(handle, event)):
                        yield sse(chunk)
                else:
                    note_error(_failure(event).message)
                    yield sse(_failure(event).body())
                    yield DONE
                    return
            if buffer is not None:
                for chunk in _drain(shape, buffer.due()):
                    yield sse(chunk)
        if options.include_usage:
            yield sse(shape.usage(counter.usage()))
        yield DONE
    finally:
        handle.cancel()
        counter.add_unfinished(handle)
        if on_close is not None:
            on_close()


def _drain(shape: StreamShape, pieces: list[tuple[int, Piece]]) -> list[Any]:
    return [chunk for choice, piece in pieces for chunk in shape.piece(choice, piece)]


def sse_response(handle: JobHandle, shape: StreamShape, options: StreamOptions, clock: RequestClock,
                 on_close: Callable[[], None] | None = None) -> Stream:
    """The SSE response; `on_close` runs when the stream ends, however it ends."""
    return Stream(stream(handle, shape, options, clock, on_close), media_type="text/event-stream",
                  headers=SSE_HEADERS)
