"""Answering a plan on an upstream server (a model configured with `upstream = "https://HOST/v1"`).

`app.run.answer` hands the plan here when its model runs upstream. The plan becomes an OpenAI
request (`app.pipeline.upstream.body`), streamed from the upstream (`backends.upstream`); its chunks
become the events the local engine produces (`TextDelta`, `ChoiceFinished`, `JobFailed`) on an
`UpstreamHandle`, which `app.run.answer` consumes with the same `stream` and `collect` as a
local job's. So each front door's shaper writes the answer, buffering and the request log work
as for a local model, and a client that leaves cancels the handle, which drops the upstream
connection (the upstream stops generating).

Chat output arrives split into content, reasoning and tool calls; each delta becomes a `TextDelta`
carrying its `OutputPart`, which the shapers read as they read a local parser's events
(`app.pipeline.output.SplitOutput`): no chat format parses it again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.pipeline.errors import ApiError
from app.pipeline.plan import Prompts, RequestPlan
from app.pipeline.prepare import PreparedRequest
from app.pipeline.record import note_caller, note_error, note_upstream
from app.pipeline.upstream.body import upstream_request
from backends.jobs import (
    ChoiceFinished,
    Event,
    GenerationJob,
    JobFailed,
    JobHandle,
    OutputPart,
    PromptSpec,
    SamplingParams,
    TextDelta,
)
from backends.registry import ModelSpec
from backends.upstream import UpstreamFailure, UpstreamStream

ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
               429: "rate_limit_error"}


class UpstreamError(ApiError):
    """An upstream's failure in our error shape, with the status it should reach the client with."""

    def __init__(self, failure: UpstreamFailure):
        super().__init__(failure.message, param=failure.param, code=failure.code, headers=failure.headers)
        self.status_code = failure.status
        self.error_type = ERROR_TYPES.get(failure.status,
                                          "server_error" if failure.status >= 500 else "invalid_request_error")


def prepared_for(plan: RequestPlan) -> PreparedRequest:
    """The plan with no local part: its job counts the prompts and choices the handle reports."""
    count = len(plan.input.prompts) if isinstance(plan.input, Prompts) else 1
    job = GenerationJob(prompts=tuple(PromptSpec((), 0) for _ in range(count)), n=plan.n, sampling=SamplingParams(),
                        stream=plan.stream is not None)
    return PreparedRequest(plan, job)


async def start_upstream(plan: RequestPlan, spec: ModelSpec) -> tuple[PreparedRequest, UpstreamHandle]:
    """The plan sent to the upstream `spec` runs on: what the shapers need, and the handle its
    answer arrives on. 400 for what cannot be forwarded; the upstream's error answer (or its
    absence) raises `UpstreamError` here, before anything of our answer is sent."""
    assert spec.upstream is not None
    path, body = upstream_request(plan, spec)
    prepared = prepared_for(plan)
    note_caller(plan.caller.user, plan.caller.metadata)
    note_upstream(spec.id, spec.upstream.url, prepared.job)
    handle = UpstreamHandle(prepared.job, UpstreamStream(spec.upstream, path, body))
    await handle.start()
    return prepared, handle


class UpstreamHandle(JobHandle):
    """A `JobHandle` whose events come from an upstream's stream, read by a task of its own;
    cancelling it stops that task and drops the connection."""

    def __init__(self, job: GenerationJob, call: UpstreamStream):
        super().__init__(job, asyncio.get_running_loop())
        self.call = call
        self._reader: asyncio.Task[None] | None = None
        self._first: dict[int, float] = {}  # per choice: when its first text came
        self._ended: dict[int, tuple[str, str | None]] = {}  # per choice: finish reason, stop sequence
        self._done: set[int] = set()  # choices whose ChoiceFinished went out

    async def start(self) -> None:
        """Send the request; an error answer raises here (before any of our answer is sent)."""
        try:
            await self.call.open()
        except UpstreamFailure as failure:
            note_error(failure.message)
            raise UpstreamError(failure) from None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    def cancel(self) -> None:
        super().cancel()
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()

    async def _read(self) -> None:
        try:
            async for event in self.call.events():
                self.deliver(self._translate(event))
            self.deliver(self._finish({}))  # no usage came: the choices still end
        except UpstreamFailure as failure:
            self.deliver([JobFailed(UpstreamError(failure))])
        except Exception as error:  # noqa: BLE001 - an answer we cannot read must end the request, not hang it
            failure = UpstreamFailure(502, f"upstream {self.call.upstream.url} sent an answer that cannot be read: "
                                           f"{type(error).__name__}: {error}", code="upstream_error")
            self.deliver([JobFailed(UpstreamError(failure))])
        finally:
            await self.call.close()

    def _translate(self, event: dict[str, Any]) -> list[Event]:
        error = event.get("error")
        if error is not None or event.get("object") == "error":
            message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
            failure = UpstreamFailure(502, f"upstream {self.call.upstream.url} failed mid-answer: "
                                           f"{message or event.get('message') or event}", code="upstream_error")
            return [JobFailed(UpstreamError(failure))]
        events: list[Event] = []
        for choice in event.get("choices") or []:
            index = choice.get("index", 0)
            if not isinstance(index, int) or not 0 <= index < self.job.choice_count:
                continue
            deltas = _choice_deltas(index, choice)
            if deltas:
                self._first.setdefault(index, time.perf_counter())
                self.generated[index] += 1  # chunks, about tokens: what an abandoned answer cost
                events.extend(deltas)
            reason = choice.get("finish_reason")
            if reason is not None:
                stop = choice.get("stop_reason")
                self._ended[index] = ("length" if reason == "length" else "stop",
                                      stop if isinstance(stop, str) else None)
        usage = event.get("usage")
        if isinstance(usage, dict):
            events.extend(self._finish(usage))
        return events

    def _finish(self, usage: dict[str, Any]) -> list[Event]:
        """The ended choices' `ChoiceFinished`, the upstream's usage on the first one (it counts
        the whole request); a choice the stream left open fails the answer."""
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        counts = [_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), _count(cached)]
        events: list[Event] = []
        for choice in range(self.job.choice_count):
            if choice in self._done:
                continue
            if choice not in self._ended:
                if usage:
                    continue  # a usage chunk before the end: the choice goes on
                failure = UpstreamFailure(502, f"upstream {self.call.upstream.url} ended the answer before choice "
                                               f"{choice} finished", code="upstream_error")
                return [*events, JobFailed(UpstreamError(failure))]
            reason, stop = self._ended[choice]
            prompt, completion, cached_tokens = counts
            counts = [0, 0, 0]
            self._done.add(choice)
            events.append(ChoiceFinished(choice, reason, prompt, completion, cached_tokens,  # type: ignore[arg-type]
                                         first_token_at=self._first.get(choice), stop_sequence=stop))
        return events


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _choice_deltas(index: int, choice: dict[str, Any]) -> list[TextDelta]:
    """A chunk's choice as events: a completion's text as it is, a chat delta's reasoning,
    content and tool-call fragments each as its `OutputPart`."""
    if "delta" not in choice:
        text = choice.get("text")
        return [TextDelta(index, text, -1)] if isinstance(text, str) and text else []
    delta = choice.get("delta") or {}
    deltas = []
    for kind, text in (("reasoning", delta.get("reasoning_content") or delta.get("reasoning")),
                       ("content", delta.get("content"))):
        if isinstance(text, str) and text:
            deltas.append(TextDelta(index, text, -1, part=OutputPart(kind, text)))
    for position, call in enumerate(delta.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        function = call.get("function") or {}
        arguments = function.get("arguments") or ""
        arguments = arguments if isinstance(arguments, str) else ""
        name, call_id = function.get("name"), call.get("id")
        deltas.append(TextDelta(index, arguments, -1, part=OutputPart(
            "call", arguments, call.get("index", position), name if isinstance(name, str) else None,
            call_id if isinstance(call_id, str) else None)))
    return deltas
