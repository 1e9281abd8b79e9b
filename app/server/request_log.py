"""One log line per HTTP request (logger `fireside.requests`), in logfmt.

What a request did is gathered in a `RequestRecord` (`app.pipeline.record`): the ASGI wrapper in
`app.server.metrics` opens it, the pipeline fills it in, and this module writes it as one line
when the request ends.

The line, with fields left out when they do not apply (no generation ran, no user given, ...):

    request id=req-3f2a... method=POST route=/v1/chat/completions status=200 model=smollm2
      response_id=chatcmpl-... stream=false prompt_tokens=31 cached_tokens=20 cached_from=checkpoint
      completion_tokens=16
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

import json
import logging
import re
from typing import Any

from app.pipeline.record import UNMATCHED_ROUTE, RequestRecord

log = logging.getLogger("fireside.requests")

MAX_TEXT = 2000  # characters of prompt or output text in a line (with --log-prompts)
QUIET_ROUTES = frozenset({"/health", "/metrics"})  # no line when they succeed
_PLAIN = re.compile(r"[^\s\"=\\\x00-\x1f\x7f]+")


# ---- the line ----------------------------------------------------------------------------

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
                   cached_tokens=counter.cached_tokens,
                   cached_from=",".join(sorted(counter.cache_sources)) or None,  # slot, checkpoint, ram, disk
                   completion_tokens=counter.completion_tokens,
                   drafted_tokens=counter.draft_tokens or None,  # checked in batches (a prediction, prompt lookup, a draft model)
                   accepted_draft_tokens=counter.draft_kept if counter.draft_tokens else None,
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
