"""A TGI request as the one request plan, with TGI's rules: greedy unless `do_sample` or a
sampling parameter is given, 100 new tokens unless told, `best_of` only when sampling and not
streamed, `decoder_input_details` only whole, the seed a sampled answer used reported back."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from app.api.tgi.wire import Grammar, TgiGenerateParameters, TgiGenerateRequest
from app.pipeline.errors import BadRequest
from app.pipeline.plan import (
    Caller,
    OutputOptions,
    Prompts,
    RequestPlan,
    ResponseFormat,
    Sampling,
    StreamPlan,
)
from backends.jobs import CacheKeys, LogprobOptions

DEFAULT_MAX_NEW_TOKENS = 100  # TGI's default (router/src/lib.rs `default_max_new_tokens`)
SEED_BITS = 32  # the engine's seeds are 32-bit


@dataclass(frozen=True)
class TgiAnswer:
    """What the answer carries besides the text."""

    details: bool  # `details` (whole answers; a stream always ends with its details)
    prefill: bool  # `decoder_input_details`: the prompt's tokens with their log-probabilities
    tokens: bool  # per-token log-probabilities are computed (details, or a stream)
    top_n: int  # `top_n_tokens`
    best_of: int  # choices sampled; the most likely one is the answer
    full_text: str  # `return_full_text`: the prompt, put before the generated text
    seed: int | None  # the seed sampling used (None: greedy)


def tgi_plan(request: TgiGenerateRequest, model: str, max_logprobs: int) -> tuple[RequestPlan, TgiAnswer]:
    parameters = request.parameters or TgiGenerateParameters()
    if not request.inputs:
        raise BadRequest("inputs must not be empty", param="inputs")
    _refuse(parameters)
    stream = bool(request.stream)
    sampling = parameters.do_sample or any(
        value is not None for value in (parameters.temperature, parameters.top_k, parameters.top_p,
                                        parameters.typical_p))
    best_of = parameters.best_of or 1
    if best_of > 1:
        if not sampling:
            raise BadRequest("best_of above 1 needs sampling: set do_sample, or a temperature, top_k, top_p or "
                             "typical_p", param="best_of")
        if stream:
            raise BadRequest("best_of above 1 cannot stream: the best sequence is known only at the end",
                             param="best_of")
    if parameters.decoder_input_details and stream:
        raise BadRequest("decoder_input_details cannot stream (as in TGI)", param="decoder_input_details")
    top_n = parameters.top_n_tokens or 0
    if top_n > max_logprobs:
        raise BadRequest(f"top_n_tokens must be at most {max_logprobs} (--max-logprobs), got {top_n}",
                         param="top_n_tokens")
    details = parameters.details or parameters.decoder_input_details
    per_token = details or stream or best_of > 1
    seed = None
    if sampling:
        seed = parameters.seed if parameters.seed is not None else secrets.randbits(SEED_BITS)
    logprobs = None
    if per_token:
        logprobs = LogprobOptions(top=top_n, sampling=False,
                                  prompt_last=(1 << 30) if parameters.decoder_input_details else 0)
    plan = RequestPlan(
        model=model,
        input=Prompts((request.inputs,), keep_last=parameters.truncate),
        n=best_of,
        max_tokens=parameters.max_new_tokens,
        default_max_tokens=DEFAULT_MAX_NEW_TOKENS,
        sampling=Sampling(
            temperature=parameters.temperature if sampling else 0.0, top_k=parameters.top_k,
            top_p=parameters.top_p, typical_p=parameters.typical_p,
            frequency_penalty=parameters.frequency_penalty, repetition_penalty=parameters.repetition_penalty,
            seed=seed),
        stop=tuple(parameters.stop) if parameters.stop is not None else None,
        response_format=_grammar(parameters.grammar) if parameters.grammar is not None else None,
        cache=CacheKeys(isolation=request.prompt_cache_isolation_key,
                        affinity=request.prompt_cache_key if request.prompt_cache_key is not None else request.user),
        output=OutputOptions(logprobs=logprobs, top_logprobs=top_n, raw_output=bool(request.raw_output),
                             perf_in_body=bool(request.perf_metrics_in_response),
                             internal_logprobs=stream and not (details or top_n or best_of > 1)),
        stream=StreamPlan(include_usage=False) if stream else None,
        caller=Caller(request.user),
    )
    answer = TgiAnswer(details=details, prefill=parameters.decoder_input_details, tokens=per_token, top_n=top_n,
                       best_of=best_of, full_text=request.inputs if parameters.return_full_text else "", seed=seed)
    return plan, answer


def _refuse(parameters: TgiGenerateParameters) -> None:
    if parameters.watermark:
        raise BadRequest("watermark is not supported: Fireside does not bias sampling toward a watermark "
                         "(Kirchenbauer et al.); leave it false", param="watermark")


def _grammar(grammar: Grammar) -> ResponseFormat:
    if grammar.type == "json":
        if not isinstance(grammar.value, (dict, str)):
            raise BadRequest("grammar.value of type json is a JSON schema (an object, or its JSON text)",
                             param="grammar")
        return ResponseFormat("json_schema", schema=grammar.value)
    if grammar.type == "json_schema":
        if not isinstance(grammar.value, dict) or "schema" not in grammar.value:
            raise BadRequest("grammar.value of type json_schema is {\"name\": ..., \"schema\": {...}}", param="grammar")
        return ResponseFormat("json_schema", json_schema=grammar.value)
    raise BadRequest("grammar of type regex is not supported: Fireside constrains output with JSON schemas "
                     "(type json or json_schema); a schema {\"type\": \"string\", \"pattern\": ...} gives a "
                     "quoted string that matches a pattern", param="grammar")
