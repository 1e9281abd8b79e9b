"""Prometheus metrics (`GET /metrics`) and the ASGI wrapper that sees every request once.

Each app has its own `CollectorRegistry` (several apps in one process, as in tests, do not share
counts). Per-request numbers are recorded once, when a request ends (`Metrics.observe`); engine
state (queue, slots, loaded models) is read from the registry when Prometheus scrapes, by a
custom collector, so nothing runs per token.

Metrics (labels in braces):
- `fireside_http_requests_total{route,status}` counter; `route` is the handler's path template
  (`/v1/models/{model_id:path}`), `unmatched` for paths no handler serves
- `fireside_http_request_duration_seconds{route}` histogram, arrival to the last byte sent
- `fireside_prompt_tokens_total{model}`, `fireside_cached_prompt_tokens_total{model}`,
  `fireside_completion_tokens_total{model}` counters
- `fireside_draft_tokens_total{model}` and `fireside_draft_accepted_tokens_total{model}` counters:
  drafted tokens checked and kept (acceptance: their ratio)
- `fireside_time_to_first_token_seconds{model}` histogram
- `fireside_decode_tokens_per_second{model}` histogram, tokens after each choice's first one
- `fireside_queue_depth{model}` requests waiting for a slot, `fireside_slots_busy{model}`,
  `fireside_slots_total{model}`, `fireside_models_loaded`, `fireside_model_loaded{model}`,
  `fireside_kv_cache_bytes{model}` and `fireside_kv_cache_used_bytes{model}` gauges
- `fireside_prefix_cache_hit_ratio{model}` gauge: cached / prompt tokens since start (the two
  counters above give it over any window: `rate(cached) / rate(prompt)`)
- `fireside_checkpoints{model}`, `fireside_checkpoint_bytes{model}`, `fireside_ram_cache_entries{model}`,
  `fireside_ram_cache_bytes{model}`, `fireside_ram_cache_hits{model}`, `fireside_ram_cache_hit_ratio{model}`
  and `fireside_reused_prompt_tokens{model,source}` (source: slot, checkpoint, ram, disk) gauges
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from litestar import Request, Response, get
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.pipeline.record import RequestRecord, close_record, open_record, request_id
from app.server.request_log import log_request
from backends.kv_cache import engine_kv

if TYPE_CHECKING:
    from litestar import Litestar
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

    from backends.registry import ModelRegistry, ServedModel

# A desktop answers in milliseconds (a cached short prompt) to minutes (a long generation on CPU).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0)
RATE_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0)

# The classic text format every Prometheus version reads (Litestar adds `; charset=utf-8`).
CONTENT_TYPE = "text/plain; version=0.0.4"


def loaded_models(registry: ModelRegistry) -> list[ServedModel]:
    """The models loaded now (iterating the registry yields those, and loads none)."""
    return list(registry)


class EngineCollector(Collector):
    """Gauges read at scrape time: queue, slots, loaded models, prefix-cache hit ratio."""

    def __init__(self, models: Callable[[], list[ServedModel]], cache_totals: Callable[[], dict[str, tuple[int, int]]]):
        self._models = models
        self._cache_totals = cache_totals

    def collect(self) -> Iterator[Metric]:
        queue = GaugeMetricFamily("fireside_queue_depth", "Requests waiting for a free slot", labels=["model"])
        busy = GaugeMetricFamily("fireside_slots_busy", "Slots decoding a request", labels=["model"])
        total = GaugeMetricFamily("fireside_slots_total", "Slots (sequences decoded together)", labels=["model"])
        loaded = GaugeMetricFamily("fireside_model_loaded", "1 for each loaded model", labels=["model"])
        kv_used = GaugeMetricFamily("fireside_kv_cache_used_bytes",
                                    "KV cache the slots hold (running requests and prefixes kept for reuse)",
                                    labels=["model"])
        kv_total = GaugeMetricFamily("fireside_kv_cache_bytes", "KV cache allocated for all slots", labels=["model"])
        models = self._models()
        for served in models:
            load = served.engine.load()
            queue.add_metric([served.id], load.queued_requests)
            busy.add_metric([served.id], load.busy_slots)
            total.add_metric([served.id], load.slots)
            loaded.add_metric([served.id], 1)
            whole, used = engine_kv(served.engine)
            kv_total.add_metric([served.id], whole.bytes)
            kv_used.add_metric([served.id], used.bytes)
        yield from (queue, busy, total, loaded, kv_total, kv_used)
        yield from _cache_gauges(models)
        yield GaugeMetricFamily("fireside_models_loaded", "Models loaded now", value=len(models))
        ratio = GaugeMetricFamily("fireside_prefix_cache_hit_ratio",
                                  "Prompt tokens served from the prefix cache / prompt tokens, since start",
                                  labels=["model"])
        for model, (prompt, cached) in sorted(self._cache_totals().items()):
            if prompt:
                ratio.add_metric([model], cached / prompt)
        yield ratio


def _cache_gauges(models: list[ServedModel]) -> Iterator[Metric]:
    """Checkpoints, the RAM prompt cache and where cached prompt tokens came from, per model."""
    gauges = {name: GaugeMetricFamily(f"fireside_{name}", text, labels=["model"]) for name, text in (
        ("checkpoints", "Context checkpoints the slots hold (for caches that cannot be cut back)"),
        ("checkpoint_bytes", "Bytes of the slots' context checkpoints"),
        ("ram_cache_entries", "Prompts kept in the RAM prompt cache"),
        ("ram_cache_bytes", "Bytes of the RAM prompt cache"),
        ("ram_cache_hits", "Prompts restored from the RAM prompt cache since start"),
        ("ram_cache_hit_ratio", "RAM prompt cache hits / lookups (prompts no slot held enough of) since start"))}
    reused = GaugeMetricFamily("fireside_reused_prompt_tokens", "Cached prompt tokens since start by where they "
                               "came from: slot, checkpoint, ram, disk", labels=["model", "source"])
    for served in models:
        states = served.engine.load().states
        if states is None:
            continue
        for name, value in (("checkpoints", states.checkpoints), ("checkpoint_bytes", states.checkpoint_bytes),
                            ("ram_cache_entries", states.ram_entries), ("ram_cache_bytes", states.ram_bytes),
                            ("ram_cache_hits", states.ram_hits)):
            gauges[name].add_metric([served.id], value)
        if states.ram_lookups:
            gauges["ram_cache_hit_ratio"].add_metric([served.id], states.ram_hits / states.ram_lookups)
        for source, tokens in sorted(states.reused.items()):
            reused.add_metric([served.id, source], tokens)
    yield from gauges.values()
    yield reused


class Metrics:
    """One app's metrics: its own registry, the per-request series, the scrape-time collector."""

    def __init__(self, models: Callable[[], list[ServedModel]]):
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter("fireside_http_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=registry)
        self.duration = Histogram("fireside_http_request_duration_seconds", "Time from arrival to the last byte sent",
                                  ["route"], buckets=DURATION_BUCKETS, registry=registry)
        self.prompt_tokens = Counter("fireside_prompt_tokens", "Prompt tokens (input)", ["model"], registry=registry)
        self.cached_tokens = Counter("fireside_cached_prompt_tokens", "Prompt tokens reused from the prefix cache",
                                     ["model"], registry=registry)
        self.completion_tokens = Counter("fireside_completion_tokens", "Generated tokens (output)", ["model"],
                                         registry=registry)
        self.drafted_tokens = Counter("fireside_draft_tokens", "Drafted tokens checked by the model (a draft "
                                      "model, prompt lookup or a prediction)", ["model"], registry=registry)
        self.kept_tokens = Counter("fireside_draft_accepted_tokens", "Drafted tokens the output kept", ["model"],
                                   registry=registry)
        self.ttft = Histogram("fireside_time_to_first_token_seconds", "Time from arrival to the first token",
                              ["model"], buckets=TTFT_BUCKETS, registry=registry)
        self.decode_rate = Histogram("fireside_decode_tokens_per_second",
                                     "Tokens per second after the first token, per request",
                                     ["model"], buckets=RATE_BUCKETS, registry=registry)
        self._lock = threading.Lock()
        self._cache_totals: dict[str, tuple[int, int]] = {}  # model: (prompt, cached) tokens
        registry.register(EngineCollector(models, self.cache_totals))

    def cache_totals(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            return dict(self._cache_totals)

    def observe(self, record: RequestRecord) -> None:
        """Record one finished request (called once, when its last byte went out)."""
        self.requests.labels(record.route, str(record.status)).inc()
        self.duration.labels(record.route).observe(record.seconds)
        if not record.generated:
            return
        counter, model = record.counter, record.model
        assert counter is not None and model is not None
        self.prompt_tokens.labels(model).inc(counter.prompt_tokens)
        self.cached_tokens.labels(model).inc(counter.cached_tokens)
        self.completion_tokens.labels(model).inc(counter.completion_tokens)
        if counter.draft_tokens:
            self.drafted_tokens.labels(model).inc(counter.draft_tokens)
            self.kept_tokens.labels(model).inc(counter.draft_kept)
        with self._lock:
            prompt, cached = self._cache_totals.get(model, (0, 0))
            self._cache_totals[model] = (prompt + counter.prompt_tokens, cached + counter.cached_tokens)
        if (ttft := record.ttft) is not None:
            self.ttft.labels(model).observe(ttft)
        if (rate := record.decode_rate) is not None:
            self.decode_rate.labels(model).observe(rate)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class Observer:
    """ASGI wrapper around the app's handler: sees every HTTP request exactly once (404s for
    unknown paths and errors rendered by the exception handlers included), times it, keeps its
    status, notices a client that leaves before the answer ends, then records its metrics and
    writes its log line. The generation code adds its part through `app.server.request_log`."""

    def __init__(self, app: ASGIApp, metrics: Metrics, log_prompts: Callable[[], bool]):
        self.app = app
        self.metrics = metrics
        self.log_prompts = log_prompts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord(request_id(_header(scope, b"x-request-id")), scope["method"], scope["path"],
                               log_prompts=self.log_prompts())
        token = open_record(record)
        try:
            await self.app(scope, _watch_receive(record, receive), _watch_send(record, send))
        finally:
            close_record(token)
            record.end(scope.get("path_template"))
            self.metrics.observe(record)
            log_request(record)


def _watch_receive(record: RequestRecord, receive: Receive) -> Receive:
    async def watched() -> Message:
        message = await receive()
        if message["type"] == "http.disconnect" and not record.responded:
            record.disconnected = True
        return message
    return watched


def _watch_send(record: RequestRecord, send: Send) -> Send:
    async def watched(message: Message) -> None:
        if message["type"] == "http.response.start":
            record.status = message["status"]
            message = {**message, "headers": [*message.get("headers", ()), (b"x-request-id", record.id.encode())]}
        elif message["type"] == "http.response.body":
            if record.status is not None and record.status >= 400:
                record.keep_error_body(message.get("body", b""))
            if not message.get("more_body", False):
                record.responded = True
        await send(message)
    return watched


@get("/metrics", include_in_schema=False)
async def metrics_endpoint(request: Request) -> Response[bytes]:
    metrics: Metrics = request.app.state.metrics
    return Response(metrics.exposition(), media_type=CONTENT_TYPE)


def install_observability(app: Litestar) -> Metrics:
    """Give `app` its metrics, the `/metrics` route and the per-request wrapper. Call it once
    `app.state` holds `registry` and `settings`; both are read per request or scrape."""
    metrics = Metrics(lambda: loaded_models(app.state.registry))
    app.state.metrics = metrics
    app.register(metrics_endpoint)
    app.asgi_handler = Observer(app.asgi_handler, metrics,
                                lambda: bool(getattr(app.state.settings, "log_prompts", False)))
    return metrics
