"""What the request log records about one request (`app.server.request_log` writes the line).

A `RequestRecord` lives as long as the request: the server's ASGI wrapper opens it (route,
status, total time, disconnects, the error message of a 4xx/5xx body), and the pipeline adds what
only it knows (model, token counts, the `RequestClock`) through the `note_*` functions and
`track`, which find the record through a context variable. They do nothing when no record is
open (code run outside the server, unit tests), and they are called once per request, never per
token: counts are read when the request ends.
"""

from __future__ import annotations

import contextvars
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.pipeline.usage import RequestClock, UsageCounter
    from backends.jobs import EmbeddingJob, GenerationJob
    from backends.registry import ServedModel

MAX_ERROR_BODY = 8192  # bytes of an error response kept to read its message
UNMATCHED_ROUTE = "unmatched"  # the route label of a path no handler serves
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


@dataclass
class RequestRecord:
    """What one HTTP request did, filled in as it goes and read once when it ends."""

    id: str
    method: str
    path: str
    log_prompts: bool = False
    started: float = field(default_factory=time.perf_counter)
    route: str = UNMATCHED_ROUTE
    status: int | None = None
    seconds: float = 0.0
    responded: bool = False  # the last body message went out
    disconnected: bool = False  # the client left before that
    error: str | None = None
    error_body: bytearray = field(default_factory=bytearray)
    model: str | None = None  # as requested, then the served model's id
    served: ServedModel | None = None
    upstream: str | None = None  # the server that answered, for a model that runs upstream
    job: GenerationJob | EmbeddingJob | None = None
    response_id: str | None = None
    counter: UsageCounter | None = None
    clock: RequestClock | None = None
    outputs: list[list[str]] | None = None  # per choice, the text pieces (only when logged)
    user: str | None = None
    metadata: dict[str, str] | None = None

    @property
    def generated(self) -> bool:
        """A job ran (its counts may still be zero when the client left early)."""
        return (self.served is not None or self.upstream is not None) and self.counter is not None

    @property
    def ttft(self) -> float | None:
        """Seconds from the request's arrival to its first token."""
        clock = self.clock
        if clock is None or clock.first_token is None:
            return None
        return max(0.0, clock.first_token - clock.started)

    @property
    def decode_rate(self) -> float | None:
        """Tokens per second after the first one of each choice (the prefill excluded)."""
        clock, counter, job = self.clock, self.counter, self.job
        if clock is None or counter is None or job is None or clock.first_token is None or clock.finished is None:
            return None
        tokens = counter.completion_tokens - job.choice_count
        seconds = clock.finished - clock.first_token
        return tokens / seconds if tokens > 0 and seconds > 0 else None

    def keep_error_body(self, chunk: bytes) -> None:
        room = MAX_ERROR_BODY - len(self.error_body)
        if room > 0:
            self.error_body.extend(chunk[:room])

    def end(self, route: str | None) -> None:
        self.seconds = time.perf_counter() - self.started
        self.route = route or UNMATCHED_ROUTE
        if self.status is None:
            self.status = 500  # the app raised before answering
        if self.error is None and self.status >= 400:
            self.error = error_message(bytes(self.error_body)) or f"HTTP {self.status}"


_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar("fireside_request", default=None)


def open_record(record: RequestRecord) -> contextvars.Token:
    return _current.set(record)


def close_record(token: contextvars.Token) -> None:
    _current.reset(token)


def request_id(client_id: str | None) -> str:
    """The client's `X-Request-Id` when it is a plain token, else a new one."""
    if client_id and _CLIENT_ID.fullmatch(client_id):
        return client_id
    return f"req-{uuid.uuid4().hex}"


# ---- hooks for the generation code (each a no-op outside a request) ------------------------------

def note_model(name: str) -> None:
    """The model a request asked for (kept even when it does not exist)."""
    record = _current.get()
    if record is not None:
        record.model = name


def note_job(served: ServedModel, job: GenerationJob | EmbeddingJob) -> None:
    record = _current.get()
    if record is not None:
        record.served, record.job, record.model = served, job, served.id


def note_upstream(model_id: str, url: str, job: GenerationJob) -> None:
    """A job forwarded to an upstream server (`app.pipeline.upstream.answer`): its line names the server."""
    record = _current.get()
    if record is not None:
        record.upstream, record.job, record.model = url, job, model_id


def note_response_id(response_id: str) -> None:
    """The id the response carries; the first one a request makes is its own."""
    record = _current.get()
    if record is not None and record.response_id is None:
        record.response_id = response_id


def note_caller(user: str | None, metadata: dict[str, str] | None) -> None:
    """The request's `user` and `metadata`, shown in its line as given."""
    record = _current.get()
    if record is not None:
        record.user, record.metadata = user, metadata


def track(counter: UsageCounter, clock: RequestClock, outputs: list[list[str]] | None = None) -> None:
    """The counter and clock a job fills in; read when the request ends, so nothing per token."""
    record = _current.get()
    if record is not None:
        record.counter, record.clock = counter, clock
        if record.log_prompts and outputs is not None:
            record.outputs = outputs


def output_parts(choices: int) -> list[list[str]] | None:
    """Lists a stream appends its text pieces to, only when `--log-prompts` wants them."""
    record = _current.get()
    if record is None or not record.log_prompts:
        return None
    return [[] for _ in range(choices)]


def note_error(message: str) -> None:
    """An error the status does not show (a stream that failed after its 200)."""
    record = _current.get()
    if record is not None and record.error is None:
        record.error = message


def error_message(body: bytes) -> str | None:
    """The message of an error body in any of the front doors' shapes: OpenAI's and Anthropic's
    `error.message`, Ollama's and TGI's `error` string, or the 422 `detail` list."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace").strip() or None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        detail = data.get("detail")
        if isinstance(detail, list) and detail and isinstance(detail[0], dict):
            first = detail[0]
            loc = ".".join(str(part) for part in first.get("loc", []))
            return f"{loc}: {first.get('msg')}" if loc else str(first.get("msg"))
        if isinstance(detail, str):
            return detail
    return None
