"""Running a request plan (DESIGN steps 3 and 6): lease its model, prepare the job, submit it,
then collect a whole answer or stream the engine's events, through the dialect's `Shaper`.

Every front door answers through `answer`: it brings a plan and a way to build its shaper, and
gets back a whole `Response` or a streamed one. A stream releases the model when it ends, however
it ends; a client that leaves cancels the job at the next step. A door that needs more of
`answer` than the answer says so with a `PlanOnModel` (the plan finished once the model is held)
and `AnswerHooks` (the time the model took to load, the finished answer): one lease per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from litestar.response import Response, Stream
from litestar.types import Receive

from app.media.fetch import MediaPolicy
from app.pipeline.closing_stream import ClosingStream
from app.pipeline.errors import (
    ApiError,
    BadRequest,
    EngineFailure,
    ModelNotFound,
    ModelUnavailable,
    TooManyRequests,
)
from app.pipeline.framing import Framing
from app.pipeline.plan import RequestPlan, StreamPlan
from app.pipeline.prepare import PreparedRequest, prepare
from app.pipeline.record import (
    note_caller,
    note_error,
    note_job,
    note_model,
    note_response_id,
    output_parts,
    track,
)
from app.pipeline.stream_buffer import ChunkBuffer, Entry, Piece
from app.pipeline.upstream.answer import start_upstream
from app.pipeline.usage import RequestClock, UsageCounter
from backends.embedder import EmbeddingError
from backends.engine import JobTooLarge, QueueFull
from backends.jobs import (
    ChoiceFinished,
    EmbeddingJob,
    Event,
    GenerationJob,
    JobFailed,
    JobHandle,
    OutputPart,
    PromptLogprobs,
    TextDelta,
)
from backends.llama_model import ModelLoadError
from backends.registry import Lease, ModelRegistry, ModelSpec, ServedModel
from backends.rpc import WorkerLost


@dataclass(frozen=True)
class RequestContext:
    """What a handler gets besides its body: the models, the client's channel, the request's clock."""

    registry: ModelRegistry
    receive: Receive
    clock: RequestClock = field(default_factory=RequestClock)
    media: MediaPolicy = field(default_factory=MediaPolicy)  # which image URLs may be fetched


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
    split: list[OutputPart] | None = None  # output that came already split (an upstream's)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def piece(self) -> Piece:
        """The whole output as one piece, for the door's output reader."""
        return Piece(self.text, parts=self.split)


class Shaper(Protocol):
    """How a dialect writes one request's answer: its stream chunks (each list may be empty) and
    its whole response."""

    def opening(self) -> list[Any]: ...
    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[Any]: ...
    def piece(self, choice: int, piece: Piece) -> list[Any]: ...
    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[Any]: ...
    def usage(self, counter: UsageCounter) -> Any: ...
    def failed(self, error: ApiError) -> Any: ...
    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> Response: ...


MakeShaper = Callable[[PreparedRequest, RequestClock], Shaper]
OnFinal = Callable[[Shaper], Awaitable[None]]


@dataclass(frozen=True)
class PlanOnModel:
    """A plan its door finishes once the model is held, in the one lease `answer` takes: `build`
    gets the served model (None for a model that runs upstream, where nothing is held here) and
    returns the plan, after the door's checks against the model (Ollama's `num_ctx`, its
    `keep_alive` set while the model is held) or with inputs made of the model's tokens (Ollama's
    `suffix` and `context`). Its errors answer the request as the plan's own would."""

    model: str
    build: Callable[[ServedModel | None], Awaitable[RequestPlan]]


@dataclass(eq=False)
class AnswerHooks:
    """What a door may want of `answer` besides the answer. Nothing here runs per token, and a
    request without hooks pays nothing for them.

    - `load_seconds` is written by `answer`: how long getting the lease on the model took (loading
      it when it was not loaded; 0 for a model that runs upstream). It is known when the shaper
      is made, so a shaper may report it (Ollama's `load_duration`).
    - `on_final(shaper)` is awaited once, when the answer has its last word: for a whole answer
      after the shaper's `whole`; for a stream when the last choice has finished (or the job
      failed) and the shaper has written its last chunks, before they go out, so that what it
      keeps is there by the time the client reads the end. Not called when the request fails
      before answering, nor when a stream's client leaves first.
    """

    on_final: OnFinal | None = None
    load_seconds: float = 0.0


async def answer(context: RequestContext, plan: RequestPlan | PlanOnModel, make_shaper: MakeShaper,
                 framing: Framing, hooks: AnswerHooks | None = None) -> Response | Stream:
    """The plan's answer, whole or streamed (`plan.stream`) in `framing`, on one lease."""
    on_final = hooks.on_final if hooks is not None else None
    spec = context.registry.knows(plan.model)
    if spec is not None and spec.upstream is not None:
        if isinstance(plan, PlanOnModel):
            plan = await plan.build(None)
        return await _answer_upstream(context, plan, spec, make_shaper, framing, on_final)
    started = time.perf_counter()
    lease = await acquire_model(context.registry, plan.model)
    if hooks is not None:
        hooks.load_seconds = time.perf_counter() - started
    try:
        if isinstance(plan, PlanOnModel):
            plan = await plan.build(lease.served)
        prepared = await prepare(plan, lease.served, context.media)
        shaper = make_shaper(prepared, context.clock)
        note_caller(plan.caller.user, plan.caller.metadata)
        handle = submit(lease.served, prepared.job)
        if plan.stream is not None:
            frames = stream(handle, shaper, plan.stream, context.clock, framing, lease.release, on_final)
            return ClosingStream(frames, media_type=framing.media_type, headers=framing.headers)
        results, counter = await collect(handle, context.receive, context.clock)
    except BaseException:
        lease.release()
        raise
    lease.release()
    return await _whole(shaper, results, counter, on_final)


async def _whole(shaper: Shaper, results: list[ChoiceResult], counter: UsageCounter,
                 on_final: OnFinal | None) -> Response:
    response = shaper.whole(results, counter)
    if on_final is not None:
        await on_final(shaper)
    return response


async def _answer_upstream(context: RequestContext, plan: RequestPlan, spec: ModelSpec, make_shaper: MakeShaper,
                           framing: Framing, on_final: OnFinal | None) -> Response | Stream:
    """The plan's answer from the server its model runs on (`app.pipeline.upstream.answer`): the upstream's
    chunks arrive as a job's events, so the same shapers, `stream` and `collect` write it. An
    error the upstream answers before its stream starts keeps its status; a later one ends the
    stream with the shaper's error chunk."""
    note_model(plan.model)
    prepared, handle = await start_upstream(plan, spec)
    shaper = make_shaper(prepared, context.clock)
    if plan.stream is not None:
        frames = stream(handle, shaper, plan.stream, context.clock, framing, on_final=on_final)
        return ClosingStream(frames, media_type=framing.media_type, headers=framing.headers)
    results, counter = await collect(handle, context.receive, context.clock)
    return await _whole(shaper, results, counter, on_final)


async def acquire_model(registry: ModelRegistry, name: str, what: str = "this endpoint") -> Lease:
    """A lease on the request's model, loading it when needed (404 for an unknown one; 400 for
    one that runs upstream: `what` the caller does is not forwarded there, only `answer` is)."""
    note_model(name)
    spec = registry.knows(name)
    if spec is not None and spec.upstream is not None:
        raise BadRequest(f"{spec.id} runs on the upstream server {spec.upstream.url}: {what} is not forwarded there "
                         "(chat, completions and the other generation endpoints are)", param="model")
    try:
        lease = await registry.acquire(name)
    except ModelLoadError as error:
        raise ModelUnavailable(f"model {name} could not be loaded: {error}") from None
    if lease is None:
        raise ModelNotFound(name)
    return lease


@contextlib.asynccontextmanager
async def leased_model(registry: ModelRegistry, name: str, what: str = "this endpoint") -> AsyncIterator[ServedModel]:
    """`acquire_model`'s lease for the block's length: the served model, released after it."""
    lease = await acquire_model(registry, name, what)
    try:
        yield lease.served
    finally:
        lease.release()


def submit(served: ServedModel, job: GenerationJob | EmbeddingJob) -> JobHandle:
    note_job(served, job)
    try:
        return served.engine.submit(job)
    except QueueFull as full:
        raise TooManyRequests(str(full), full.retry_after) from None
    except JobTooLarge as large:
        raise BadRequest(str(large), param="max_tokens" if large.prompt_tokens <= large.limit else "prompt",
                         code="context_length_exceeded") from None


class ClientLeft(Exception):
    """The client went away before its job finished: the job was cancelled and nobody reads an answer."""


def _failure(event: JobFailed) -> ApiError:
    """The one mapping of an engine failure to an API error, for every door and every kind of job."""
    error = event.error
    if isinstance(error, WorkerLost):  # the model's RPC worker went away: the model is unavailable
        return ModelUnavailable(str(error))
    if isinstance(error, EmbeddingError):  # an input the embedding context cannot take
        return BadRequest(str(error), param=getattr(error, "param", None) or "input")
    return error if isinstance(error, ApiError) else EngineFailure(f"the engine failed: {error}")


def _prompt_entries(handle: JobHandle, event: PromptLogprobs) -> list[Entry]:
    prompt = handle.job.prompts[event.choice // handle.job.n].tokens
    return list(zip(prompt[event.start:], event.entries, strict=True))


async def _cancel_when_client_leaves(handle: JobHandle, receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    handle.cancel()


async def job_events(handle: JobHandle, receive: Receive) -> AsyncIterator[Event]:
    """A submitted job's events until it is done, for an answer sent whole: a client that goes
    away meanwhile cancels the job (then `ClientLeft` is raised); a failure is raised as its
    `ApiError`. Leaving the loop early cancels the job too."""
    watcher = asyncio.create_task(_cancel_when_client_leaves(handle, receive))
    try:
        async for event in handle.events():
            if isinstance(event, JobFailed):
                raise _failure(event)
            yield event
        if handle.cancelled:
            raise ClientLeft
    finally:
        watcher.cancel()
        handle.cancel()  # a no-op once finished; frees the slots if we were cancelled


async def collect(handle: JobHandle, receive: Receive, clock: RequestClock) -> tuple[list[ChoiceResult], UsageCounter]:
    """Wait for every choice of a job; a client that goes away meanwhile cancels it."""
    results = [ChoiceResult() for _ in range(handle.job.choice_count)]
    counter = UsageCounter(handle.job.n)
    track(counter, clock, [result.parts for result in results])
    try:
        async for event in job_events(handle, receive):
            if isinstance(event, TextDelta):
                result = results[event.choice]
                if event.text:
                    result.parts.append(event.text)
                if event.part is not None:
                    if result.split is None:
                        result.split = []
                    result.split.append(event.part)
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
    except ClientLeft:
        pass  # the shaper writes what there is; nobody reads it
    finally:
        counter.add_unfinished(handle)
    clock.finish()
    return results, counter


async def stream(handle: JobHandle, shaper: Shaper, options: StreamPlan, clock: RequestClock, framing: Framing,
                 on_close: Callable[[], None] | None = None, on_final: OnFinal | None = None) -> AsyncIterator[bytes]:
    """The framed chunks of a job's answer as its events arrive, then the framing's end; a failure
    ends it with the shaper's error chunk. Leaving early cancels the job; `on_close` runs when the
    stream ends, however it ends; `on_final` (see `AnswerHooks`) before the last choice's chunks,
    or the error chunk, go out."""
    frame = framing.frame
    counter = UsageCounter(handle.job.n)
    buffer = ChunkBuffer(options.buffer) if options.buffer is not None else None
    remaining = handle.job.choice_count
    outputs = output_parts(remaining)  # only with --log-prompts
    track(counter, clock, outputs)
    try:
        for chunk in shaper.opening():
            yield frame(chunk)
        while remaining:
            events = await handle.next_events(buffer.wait() if buffer is not None else None)
            if events is None:
                return  # cancelled
            for event in events:
                if isinstance(event, TextDelta):
                    if outputs is not None:
                        outputs[event.choice].append(event.text)
                    if buffer is None:
                        for chunk in shaper.piece(event.choice, Piece.of(event)):
                            yield frame(chunk)
                    else:
                        buffer.add(event)
                elif isinstance(event, ChoiceFinished):
                    counter.add(event)
                    if event.first_token_at is not None:
                        clock.token(event.first_token_at)
                    remaining -= 1
                    if buffer is not None:
                        for choice, piece in buffer.take(event.choice):
                            for chunk in shaper.piece(choice, piece):
                                yield frame(chunk)
                    if not remaining:
                        clock.finish()
                    chunks = shaper.finished(event.choice, event.finish_reason, not remaining, counter)
                    if not remaining and on_final is not None:
                        await on_final(shaper)
                    for chunk in chunks:
                        yield frame(chunk)
                elif isinstance(event, PromptLogprobs):
                    for chunk in shaper.prompt_scored(event.choice, _prompt_entries(handle, event)):
                        yield frame(chunk)
                else:
                    failure = _failure(event)
                    note_error(failure.message)
                    last = shaper.failed(failure)
                    if on_final is not None:
                        await on_final(shaper)
                    yield frame(last)
                    yield framing.end
                    return
            if buffer is not None:
                for choice, piece in buffer.due():
                    for chunk in shaper.piece(choice, piece):
                        yield frame(chunk)
        if options.include_usage:
            yield frame(shaper.usage(counter))
        yield framing.end
    finally:
        handle.cancel()
        counter.add_unfinished(handle)
        if on_close is not None:
            on_close()
