"""llama-server's `/completion` as the one request plan, with its rules: its sampling defaults
(temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), `n_predict: -1` for as much as the context
holds, prompts as text, token ids or both mixed, its `samplers` order. A value Fireside cannot
honour is refused (400) by name; one that leaves its sampler or control off is accepted."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any

from app.api.llamacpp.tokens import MixedPrompt, mixed_tokens
from app.api.llamacpp.wire import LlamaCompletionRequest
from app.pipeline.errors import BadRequest
from app.pipeline.plan import (
    OutputOptions,
    Prompts,
    RequestPlan,
    ResponseFormat,
    Sampling,
    StreamPlan,
)
from app.pipeline.run import PlanOnModel
from backends.jobs import CacheKeys, LogprobOptions
from backends.registry import ServedModel

SEED_MASK = 0xFFFFFFFF  # llama.cpp's seeds are 32-bit; LLAMA_DEFAULT_SEED (0xFFFFFFFF) means random
# Fireside's chain, in its fixed order; llama-server's names (and its one-letter codes) for each
CHAIN = ("top_k", "typ_p", "top_p", "min_p", "temperature")
SAMPLER_NAMES = {"top_k": "top_k", "typ_p": "typ_p", "typical_p": "typ_p", "top_p": "top_p", "min_p": "min_p",
                 "temperature": "temperature", "dry": "dry", "xtc": "xtc", "top_n_sigma": "top_n_sigma",
                 "penalties": "penalties"}
SAMPLER_LETTERS = {"k": "top_k", "y": "typ_p", "p": "top_p", "m": "min_p", "t": "temperature", "d": "dry",
                   "x": "xtc", "s": "top_n_sigma", "e": "penalties"}


@dataclass(frozen=True)
class CompletionAnswer:
    """What the answer carries besides the text."""

    n_probs: int
    return_tokens: bool
    timings_per_token: bool
    response_fields: tuple[str, ...]
    settings: dict[str, Any]  # `generation_settings`, as llama-server echoes them


def prompt_list(prompt: str | list[Any]) -> list[MixedPrompt]:
    """`prompt` as a list of prompts: a text or a list with a token id in it is one prompt; a list
    of texts, or of lists, is several (as llama-server reads them)."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise BadRequest("prompt must not be empty", param="prompt")
    if any(isinstance(item, int) and not isinstance(item, bool) for item in prompt):
        one = prompt
        if not all(isinstance(item, (int, str)) and not isinstance(item, bool) for item in one):
            raise BadRequest("prompt: a prompt of token ids holds ids and texts only", param="prompt")
        return [one]
    out: list[MixedPrompt] = []
    for i, item in enumerate(prompt):
        if isinstance(item, str) or isinstance(item, list) and item and all(
                isinstance(part, (int, str)) and not isinstance(part, bool) for part in item):
            out.append(item)
        elif isinstance(item, dict):
            raise BadRequest(f"prompt[{i}]: multimodal prompt objects are not supported here; send images "
                             "through /v1/chat/completions", param="prompt")
        else:
            raise BadRequest(f"prompt[{i}] must be a text or a non-empty list of token ids and texts", param="prompt")
    return out


def completion_plan(request: LlamaCompletionRequest, model: str, max_logprobs: int) -> tuple[
        RequestPlan | PlanOnModel, CompletionAnswer]:
    _refuse(request, max_logprobs)
    prompts = prompt_list(request.prompt)
    n_predict = request.n_predict if request.n_predict is not None else request.max_tokens
    if n_predict == 0:
        raise BadRequest("n_predict 0 (evaluate the prompt into the cache only) is not supported: Fireside "
                         "caches prompts as it answers them; ask for at least one token", param="n_predict")
    seed = None if request.seed in (-1, SEED_MASK) else request.seed
    if seed is not None and seed < 0:
        raise BadRequest(f"seed must be -1 (random) or 0..{SEED_MASK}, got {seed}", param="seed")
    seed = seed if seed is not None else secrets.randbits(32)
    sampling = _sampling(request, seed)
    logprobs = LogprobOptions(top=request.n_probs) if request.n_probs else None
    plan = RequestPlan(
        model=model,
        input=Prompts(()),
        n=request.n_cmpl,
        max_tokens=n_predict if n_predict not in (None, -1) else None,
        sampling=sampling,
        stop=tuple(request.stop) if request.stop is not None else None,
        response_format=_response_format(request),
        cache=CacheKeys(isolation=None if request.cache_prompt else secrets.token_hex(16)),
        output=OutputOptions(logprobs=logprobs, top_logprobs=request.n_probs),
        stream=StreamPlan(include_usage=False) if request.stream else None,
    )
    answer = CompletionAnswer(request.n_probs, request.return_tokens, request.timings_per_token,
                              tuple(request.response_fields or ()), generation_settings(request, seed, n_predict))
    if all(isinstance(item, str) or all(isinstance(part, int) for part in item) for item in prompts):
        written = tuple(item if isinstance(item, str) else tuple(item) for item in prompts)
        return _with_prompts(plan, written), answer

    async def build(served: ServedModel | None) -> RequestPlan:
        if served is None:
            raise BadRequest("a prompt mixing token ids and text needs this server's tokenizer; the model runs "
                             "upstream", param="prompt")
        return _with_prompts(plan, tuple(
            item if isinstance(item, str) else tuple(mixed_tokens(served.model, item, add_special=True,
                                                                  parse_special=True, param="prompt"))
            for item in prompts))
    return PlanOnModel(model, build), answer


def _with_prompts(plan: RequestPlan, prompts: tuple[str | tuple[int, ...], ...]) -> RequestPlan:
    return replace(plan, input=Prompts(prompts))


def _refuse(request: LlamaCompletionRequest, max_logprobs: int) -> None:
    """The values Fireside cannot honour; each field's off value is accepted."""
    unsupported: list[tuple[str, bool, str]] = [
        ("dynatemp_range", request.dynatemp_range != 0, "dynamic temperature is not in Fireside's sampler chain"),
        ("xtc_probability", request.xtc_probability > 0, "the XTC sampler is not in Fireside's sampler chain"),
        ("dry_multiplier", request.dry_multiplier > 0, "the DRY sampler is not in Fireside's sampler chain"),
        ("top_n_sigma", request.top_n_sigma > 0, "the top-n-sigma sampler is not in Fireside's sampler chain"),
        ("mirostat", request.mirostat == 1, "Mirostat 1 is not supported; Mirostat 2 (mirostat: 2) is"),
        ("min_keep", request.min_keep > 0, "the samplers always keep at least one token; min_keep cannot be raised"),
        ("post_sampling_probs", request.post_sampling_probs,
         "n_probs gives the model's own log-probabilities; probabilities after the sampler chain are not reported"),
        ("return_progress", request.return_progress, "prompt processing progress is not reported"),
        ("n_keep", request.n_keep != 0, ("Fireside does not shift the context: a prompt that does not fit is "
         "refused, and a completion ends when the context is full")),
        ("n_discard", request.n_discard != 0, "Fireside does not shift the context"),
        ("n_indent", request.n_indent != 0, "indentation-aware stopping is not supported"),
        ("n_cache_reuse", request.n_cache_reuse != 0,
         "the prompt cache reuses the longest cached prefix; chunk reuse by KV shifting is not supported"),
        ("t_max_predict_ms", request.t_max_predict_ms > 0, "time limits on generation are not supported"),
        ("t_max_prompt_ms", request.t_max_prompt_ms > 0, "time limits on prompt processing are not supported"),
        ("id_slot", request.id_slot != -1, "Fireside picks the slot (by prompt-cache affinity); leave id_slot -1"),
        ("sse_ping_interval", request.sse_ping_interval is not None, "stream pings are not configurable"),
        ("lora", bool(request.lora), "serve a LoRA adapter as its own model (--lora) and name it in `model`"),
    ]
    for name, refused, why in unsupported:
        if refused:
            raise BadRequest(f"{name} cannot be honoured: {why}", param=name)
    if request.n_probs > max_logprobs:
        raise BadRequest(f"n_probs must be at most {max_logprobs} (--max-logprobs), got {request.n_probs}",
                         param="n_probs")
    penalties = (request.repeat_penalty != 1.0 or request.presence_penalty != 0.0
                 or request.frequency_penalty != 0.0)
    if penalties and request.repeat_last_n != -1:
        raise BadRequest("repeat_last_n must be -1 when a penalty is set: Fireside's penalties look back over the "
                         "whole context", param="repeat_last_n")
    if request.grammar and request.json_schema is not None:
        raise BadRequest("give grammar or json_schema, not both", param="grammar")


def _samplers(samplers: list[str] | str | None) -> set[str]:
    """The samplers of Fireside's chain that `samplers` keeps on (all when it is not given)."""
    if samplers is None:
        return set(CHAIN)
    table, items = (SAMPLER_LETTERS, list(samplers)) if isinstance(samplers, str) else (SAMPLER_NAMES, samplers)
    names = []
    for item in items:
        if item not in table:
            raise BadRequest(f"samplers: unknown sampler {item!r}; the names are {', '.join(sorted(table))}",
                             param="samplers")
        names.append(table[item])
    chain = [name for name in names if name in CHAIN]
    if len(set(chain)) != len(chain) or chain != sorted(chain, key=CHAIN.index):
        raise BadRequest(f"samplers: Fireside applies each sampler once, in the order {', '.join(CHAIN)}; "
                         f"got {', '.join(chain)}", param="samplers")
    return set(chain)


def _sampling(request: LlamaCompletionRequest, seed: int) -> Sampling:
    on = _samplers(request.samplers)
    greedy = request.temperature <= 0
    mirostat = request.mirostat == 2
    return Sampling(
        temperature=(0.0 if greedy else request.temperature) if "temperature" in on else 1.0,
        top_k=max(request.top_k, 0) if "top_k" in on else 0,
        top_p=request.top_p if "top_p" in on else 1.0,
        min_p=request.min_p if "min_p" in on else 0.0,
        typical_p=request.typical_p if "typ_p" in on else 1.0,
        repetition_penalty=request.repeat_penalty, presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        mirostat_target=request.mirostat_tau if mirostat else None,
        mirostat_lr=request.mirostat_eta if mirostat else None,
        seed=seed, logit_bias=_logit_bias(request.logit_bias), ignore_eos=request.ignore_eos)


def _logit_bias(bias: list[list[Any]] | dict[str, float | bool] | None) -> tuple[tuple[int, float], ...]:
    """`[[id, bias], ...]` or `{"id": bias}`; a bias of `false` bans the token."""
    if not bias:
        return ()
    pairs = list(bias.items()) if isinstance(bias, dict) else bias
    out = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise BadRequest(f"logit_bias[{i}] must be [token id, bias]", param="logit_bias")
        token, value = pair
        if isinstance(token, str) and token.lstrip("-").isdigit():
            token = int(token)
        if isinstance(token, (str, bool)) or not isinstance(token, int):
            raise BadRequest(f"logit_bias[{i}]: biasing the tokens of a text ({token!r}) is not supported; give "
                             "token ids (POST /tokenize finds them)", param="logit_bias")
        if value is False:
            out.append((token, float("-inf")))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((token, float(value)))
        else:
            raise BadRequest(f"logit_bias[{i}]: the bias is a number or false", param="logit_bias")
    return tuple(out)


def _response_format(request: LlamaCompletionRequest) -> ResponseFormat | None:
    if request.grammar:
        return ResponseFormat("grammar", grammar=request.grammar)
    if request.json_schema is not None:
        return ResponseFormat("json_schema", schema=request.json_schema)
    return None


def generation_settings(request: LlamaCompletionRequest, seed: int, n_predict: int | None) -> dict[str, Any]:
    """`generation_settings`: the request's fields as they were applied (its prompt left out)."""
    return {"n_predict": n_predict if n_predict is not None else -1, "seed": seed,
            "temperature": request.temperature, "dynatemp_range": request.dynatemp_range,
            "dynatemp_exponent": request.dynatemp_exponent, "top_k": request.top_k, "top_p": request.top_p,
            "min_p": request.min_p, "typical_p": request.typical_p, "repeat_last_n": request.repeat_last_n,
            "repeat_penalty": request.repeat_penalty, "presence_penalty": request.presence_penalty,
            "frequency_penalty": request.frequency_penalty, "mirostat": request.mirostat,
            "mirostat_tau": request.mirostat_tau, "mirostat_eta": request.mirostat_eta,
            "stop": request.stop or [], "max_tokens": n_predict if n_predict is not None else -1,
            "n_keep": request.n_keep, "ignore_eos": request.ignore_eos, "stream": request.stream,
            "n_probs": request.n_probs, "min_keep": request.min_keep, "grammar": request.grammar or "",
            "samplers": sorted(_samplers(request.samplers), key=CHAIN.index),
            "timings_per_token": request.timings_per_token, "post_sampling_probs": request.post_sampling_probs}
