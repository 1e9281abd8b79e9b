"""One log line per HTTP request (logger `fireside.requests`), in logfmt.

What a request did is gathered in a `RequestRecord` that lives as long as the request: the ASGI
wrapper in `app.server.metrics` opens it (route, status, total time, disconnects, the error message of a
4xx/5xx body), and the generation code adds what only it knows (model, token counts, the
`RequestClock`) through the functions below, which find the record through a context variable.
They do nothing when no record is open (code run outside the server, unit tests), and they are
called once per request, never per token: counts are read when the request ends.

The line, with fields left out when they do not apply (no generation ran, no user given, ...):

    request id=req-3f2a... method=POST route=/v1/chat/completions status=200 model=smollm2
      response_id=chatcmpl-... stream=false prompt_tokens=31 cached_tokens=0 completion_tokens=16
      ttft_ms=41.2 total_ms=230.4 disconnected=false user=alice metadata="{\"team\":\"a\"}"
      error="..." prompt="..." output="..."

(one line; wrapped here; the logging configuration may put a prefix before `request`). `id` is
the client's `X-Request-Id` when it sent a plain one, else a new `req-...`; every response carries
it back in `x-request-id`. `path` is added for paths no handler serves (route `unmatched`).
Values with spaces, quotes, `=` or control characters are JSON strings.
`prompt` (the prompt as the model saw it, chat template included) and `output` (the generated
text, one JSON list entry per choice when there are several) appear only with `--log-prompts`,
cut to `MAX_TEXT` characters (head and tail kept). Successful `/health` and `/metrics` requests
(polls and scrapes) get no line; they still count in the metrics.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.usage import RequestClock, UsageCounter
    from backends.jobs import EmbeddingJob, GenerationJob
    from backends.registry import ServedModel

log = logging.getLogger("fireside.requests")

MAX_TEXT = 2000  # characters of prompt or output text in a line (with --log-prompts)
MAX_ERROR_BODY = 8192  # bytes of an error response kept to read its message
QUIET_ROUTES = frozenset({"/health", "/metrics"})  # no line when they succeed
UNMATCHED_ROUTE = "unmatched"  # the route label of a path no handler serves
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_PLAIN = re.compile(r"[^\s\"=\\\x00-\x1f\x7f]+")


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


def current_record() -> RequestRecord | None:
    return _current.get()


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
    """A job forwarded to an upstream server (`app.upstream`): its line names the server."""
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


# ---- the line ----------------------------------------------------------------------------

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


def truncate(text: str, limit: int = MAX_TEXT) -> str:
    """Head and tail of a long text: a chat prompt's question sits at its end."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}…[{len(text) - 2 * half} chars]…{text[-half:]}"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def _texts(record: RequestRecord) -> dict[str, Any]:
    """`prompt` and `output` for --log-prompts."""
    fields: dict[str, Any] = {}
    if record.served is not None and record.job is not None:
        job = record.job
        inputs = [p.tokens for p in job.prompts] if hasattr(job, "prompts") else list(job.inputs)  # embeddings: inputs
        prompts = [truncate(record.served.model.detokenize(list(tokens))) for tokens in inputs]
        fields["prompt"] = prompts[0] if len(prompts) == 1 else prompts
    if record.outputs is not None:
        outputs = [truncate("".join(parts)) for parts in record.outputs]
        fields["output"] = outputs[0] if len(outputs) == 1 else outputs
    return fields


def fields(record: RequestRecord) -> dict[str, Any]:
    """The line's fields in order; None values are left out."""
    out: dict[str, Any] = {
        "id": record.id, "method": record.method, "route": record.route, "status": record.status,
        "model": record.model, "upstream": record.upstream, "response_id": record.response_id,
    }
    if record.route == UNMATCHED_ROUTE:
        out["path"] = record.path
    if record.generated:
        counter = record.counter
        assert counter is not None and record.job is not None
        ttft = record.ttft
        out.update(stream=record.job.stream, prompt_tokens=counter.prompt_tokens,
                   cached_tokens=counter.cached_tokens, completion_tokens=counter.completion_tokens,
                   drafted_tokens=counter.draft_tokens or None,  # checked in batches (a prediction, or prompt lookup)
                   ttft_ms=ttft * 1000 if ttft is not None else None)
    out.update(total_ms=record.seconds * 1000, disconnected=record.disconnected, user=record.user,
               metadata=record.metadata or None, error=record.error)
    if record.log_prompts:
        out.update(_texts(record))
    return out


def format_line(record: RequestRecord) -> str:
    return "request " + " ".join(f"{key}={_value(value)}" for key, value in fields(record).items()
                                 if value is not None)


def log_request(record: RequestRecord) -> None:
    """Write the request's line (never for a successful health check or scrape)."""
    if record.route in QUIET_ROUTES and record.status is not None and record.status < 400:
        return
    if log.isEnabledFor(logging.INFO):
        log.info("%s", format_line(record))
