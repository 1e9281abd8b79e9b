"""Ollama's `options`, `format`, `think` and `keep_alive` in the request plan's terms.

Ollama ignores options it does not know; Fireside is stricter: an option it cannot honour is a
400 naming it, so that nobody believes a setting took effect when it did not. An option that has
no effect given the others (`mirostat_tau` with mirostat off, `repeat_last_n` without a penalty)
is accepted, as it changes nothing in Ollama either.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from app.api.common.reasoning import reasoning_request
from app.pipeline.errors import BadRequest
from app.pipeline.plan import ResponseFormat, Sampling
from templates.reasoning import ReasoningRequest

# option -> (its type, the Sampling field it sets)
SAMPLING = {
    "temperature": (float, "temperature"),
    "top_k": (int, "top_k"),
    "top_p": (float, "top_p"),
    "min_p": (float, "min_p"),
    "typical_p": (float, "typical_p"),
    "seed": (int, "seed"),
    "repeat_penalty": (float, "repetition_penalty"),
    "presence_penalty": (float, "presence_penalty"),
    "frequency_penalty": (float, "frequency_penalty"),
}
OTHER = {"num_predict": int, "num_ctx": int, "stop": list, "mirostat": int, "mirostat_tau": float,
         "mirostat_eta": float, "repeat_last_n": int}
LOAD_TIME = ("numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all", "vocab_only",
             "use_mmap", "use_mlock", "embedding_only", "num_thread")
REFUSED = {
    "num_keep": "Fireside never shifts a full context window, so there are no prompt tokens to keep",
    "tfs_z": "tail-free sampling was removed from llama.cpp",
    "penalize_newline": "llama.cpp's penalties no longer single out the newline token",
}
THINK_LEVELS = ("low", "medium", "high")
DEFAULT_MIROSTAT_TAU, DEFAULT_MIROSTAT_ETA = 5.0, 0.1  # Ollama's


@dataclass(frozen=True)
class Options:
    """What `options` asks for: sampling, a completion budget, stops and a context size to check."""

    sampling: Sampling = field(default_factory=Sampling)
    max_tokens: int | None = None  # None: as much as the context leaves
    stop: tuple[str, ...] | None = None
    num_ctx: int | None = None  # checked against the loaded context once the model is known


def _typed(name: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is list:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value
        raise BadRequest(f"options.{name} must be a list of strings", param=f"options.{name}")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRequest(f"options.{name} must be a{'n integer' if kind is int else ' number'}, got {value!r}",
                         param=f"options.{name}")
    if kind is float and not math.isfinite(value):
        raise BadRequest(f"options.{name} must be finite", param=f"options.{name}")
    return value


def parse_options(given: dict[str, Any] | None, *, generation: bool = True) -> Options:
    """The request's `options` (400 naming any option that cannot be honoured)."""
    given = {name: value for name, value in (given or {}).items() if value is not None}
    for name in given:
        param = f"options.{name}"
        if name in LOAD_TIME:
            raise BadRequest(f"{param} is a load-time option: the model is loaded with the server's settings "
                             "(see `fireside serve --help`: --gpu-layers, --threads, ...)", param=param)
        if name in REFUSED:
            raise BadRequest(f"{param} cannot be honoured: {REFUSED[name]}", param=param)
        if name not in SAMPLING and name not in OTHER:
            raise BadRequest(f"{param} is not an option Fireside knows (it refuses rather than ignores unknown "
                             "options)", param=param)
        if not generation and name != "num_ctx":
            raise BadRequest(f"{param} does not apply to embeddings", param=param)
    values = {name: _typed(name, value, SAMPLING[name][0] if name in SAMPLING else OTHER[name])
              for name, value in given.items()}
    sampling = Sampling(**{SAMPLING[name][1]: value for name, value in values.items() if name in SAMPLING})
    if sampling.repetition_penalty is not None and sampling.repetition_penalty <= 0:
        raise BadRequest("options.repeat_penalty must be greater than 0", param="options.repeat_penalty")
    sampling = _mirostat(values, sampling)
    _penalty_window(values, sampling)
    max_tokens = None
    predict = values.get("num_predict")
    if predict is not None:
        if predict < -2:
            raise BadRequest(f"options.num_predict is a token count, -1 (no limit) or -2 (fill the context), got "
                             f"{predict}", param="options.num_predict")
        max_tokens = predict if predict >= 0 else None  # -1 and -2: the context's room bounds it either way
    num_ctx = values.get("num_ctx")
    if num_ctx is not None and num_ctx < 1:
        raise BadRequest(f"options.num_ctx must be 1 or more, got {num_ctx}", param="options.num_ctx")
    stop = values.get("stop")
    return Options(sampling, max_tokens, tuple(stop) if stop is not None else None, num_ctx)


def _mirostat(values: dict[str, Any], sampling: Sampling) -> Sampling:
    """Mirostat 2 is llama.cpp's `mirostat_v2` sampler; version 1 is not offered here."""
    mode = values.get("mirostat", 0)
    tau, eta = values.get("mirostat_tau", DEFAULT_MIROSTAT_TAU), values.get("mirostat_eta", DEFAULT_MIROSTAT_ETA)
    if mode == 0:
        return sampling  # tau and eta only tune mirostat
    if mode != 2:
        raise BadRequest(f"options.mirostat {mode} cannot be honoured: Fireside samples with Mirostat 2.0 only "
                         "(mirostat: 2) or without it (0)", param="options.mirostat")
    if tau <= 0:
        raise BadRequest("options.mirostat_tau must be greater than 0", param="options.mirostat_tau")
    if not 0 < eta <= 1:
        raise BadRequest("options.mirostat_eta must be in (0, 1]", param="options.mirostat_eta")
    return replace(sampling, mirostat_target=tau, mirostat_lr=eta)


def _penalty_window(values: dict[str, Any], sampling: Sampling) -> None:
    """Penalties here look back over the whole context (llama.cpp's `repeat_last_n: -1`)."""
    window = values.get("repeat_last_n")
    penalized = ((sampling.repetition_penalty or 1.0) != 1.0 or bool(sampling.presence_penalty)
                 or bool(sampling.frequency_penalty))
    if window is not None and window != -1 and penalized:
        raise BadRequest(f"options.repeat_last_n {window} cannot be honoured: penalties here look back over the whole "
                         "context (repeat_last_n: -1)", param="options.repeat_last_n")


def check_num_ctx(options: Options, loaded: int) -> None:
    """`num_ctx` up to the context the model is loaded with is met (a request never gets less
    room than it asks for); more is a 400, since a context is sized when the model loads."""
    if options.num_ctx is not None and options.num_ctx > loaded:
        raise BadRequest(f"options.num_ctx {options.num_ctx} is more than the {loaded} tokens per request this model "
                         "is loaded with; start the server with a larger --ctx-size", param="options.num_ctx")


def response_format(value: str | dict[str, Any] | None) -> ResponseFormat | None:
    if value is None or value == "":
        return None
    if value == "json":
        return ResponseFormat("json_object")
    if isinstance(value, dict):
        return ResponseFormat("json_schema", schema=value)
    raise BadRequest(f"format is \"json\" or a JSON schema, got {value!r}", param="format")


def reasoning(think: bool | str | None) -> ReasoningRequest | None:
    """`think`: true/false, or Ollama's levels "low", "medium", "high"."""
    if think is None:
        return None
    if isinstance(think, str) and think not in THINK_LEVELS:
        raise BadRequest(f"think is true, false or one of {', '.join(THINK_LEVELS)}, got {think!r}", param="think")
    return reasoning_request(think, effort_param="think")


def keep_alive_seconds(value: str | float | None) -> float | None:
    """Seconds from Ollama's `keep_alive`: a Go duration ("5m", "1h30m", "0s") or a number of
    seconds (300, "300"); negative: forever; None: not given (the model's own keep-alive stays)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise BadRequest(f"keep_alive is a duration like \"5m\" or seconds, got {value!r}", param="keep_alive")
    if isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _go_duration(text)
    else:
        seconds = float(value)
    return math.inf if seconds < 0 else seconds


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration(text: str) -> float:
    """A Go duration string, as Ollama parses `keep_alive`: "5m", "1h30m", "-1s"."""
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", body)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != body:
        raise BadRequest(f"keep_alive is a duration like \"5m\", \"1h30m\" or seconds, got {text!r}",
                         param="keep_alive")
    return sign * sum(float(n) * _GO_UNITS[u] for n, u in parts)
