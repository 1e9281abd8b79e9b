"""A request plan as the body of an OpenAI-compatible request to an upstream server: a chat goes
to `/chat/completions`, prompts used as written to `/completions`.

What OpenAI's API has is forwarded (sampling, `max_tokens`, `stop`, `n`, `seed`, penalties,
`response_format` with a JSON schema, tools and `tool_choice`, `user`); so are the Fireworks
fields another Fireside or Fireworks reads (`top_k`, `min_p`, `repetition_penalty`, reasoning
controls, prompt-cache keys, ...), only when the request sets them. What cannot mean the same
there is refused with a 400 naming the field, never dropped: token ids (prompts, `logit_bias`,
token predictions), a GBNF grammar, images, log-probabilities, echo, raw output.
"""

from __future__ import annotations

import json
from typing import Any

from app.pipeline.errors import BadRequest
from app.pipeline.plan import Conversation, Prompts, RequestPlan, ResponseFormat
from backends.registry import ModelSpec

MESSAGE_KEYS = ("role", "content", "name", "reasoning_content", "tool_calls", "tool_call_id")
SAMPLING = ("temperature", "top_p", "frequency_penalty", "presence_penalty", "seed",
            "top_k", "min_p", "typical_p", "repetition_penalty", "mirostat_target", "mirostat_lr")


def _refuse(spec: ModelSpec, field: str, why: str) -> BadRequest:
    assert spec.upstream is not None
    return BadRequest(f"{field} cannot be forwarded to {spec.id}, which runs on the upstream server "
                      f"{spec.upstream.url}: {why}", param=field.split(".")[0].split("[")[0])


def upstream_request(plan: RequestPlan, spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    """The upstream path and its body (always streamed, with the usage at the end); 400 for what
    the plan asks that cannot be forwarded faithfully."""
    assert spec.upstream is not None
    _check_output(plan, spec)
    defaults = spec.sampling
    body: dict[str, Any] = {"model": spec.upstream.model or spec.id}
    if isinstance(plan.input, Conversation):
        path = "/chat/completions"
        body.update(_chat(plan.input, spec))
    else:
        path = "/completions"
        body["prompt"] = _prompts(plan.input, spec)
    if plan.n != 1:
        body["n"] = plan.n
    max_tokens = plan.max_tokens if plan.max_tokens is not None else defaults.get("max_tokens",
                                                                                  plan.default_max_tokens)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    sampling = plan.sampling
    for name in SAMPLING:
        value = getattr(sampling, name)
        value = value if value is not None else defaults.get(name)
        if value is not None:
            body[name] = value
    if sampling.logit_bias:
        raise _refuse(spec, "logit_bias", "its keys are token ids of a vocabulary, which the upstream's model "
                                          "need not share")
    if sampling.ignore_eos:
        body["ignore_eos"] = True
    stop = plan.stop if plan.stop is not None else defaults.get("stop")
    if stop:
        body["stop"] = [stop] if isinstance(stop, str) else list(stop)
    if plan.response_format is not None:
        body["response_format"] = _response_format(plan.response_format, spec)
    _reasoning(plan, body)
    if plan.draft:
        if not isinstance(plan.draft, str):
            raise _refuse(spec, "speculation", "a prediction given as token ids; give it as text")
        body["prediction"] = {"type": "content", "content": plan.draft}
    if plan.cache.isolation is not None:
        body["prompt_cache_isolation_key"] = plan.cache.isolation
    if plan.cache.affinity is not None and plan.cache.affinity != plan.caller.user:
        body["prompt_cache_key"] = plan.cache.affinity
    if plan.overflow == "error":
        body["context_length_exceeded_behavior"] = "error"
    if plan.priority:
        body["service_tier"] = "priority"
    if plan.caller.user is not None:
        body["user"] = plan.caller.user
    body["stream"] = True  # whole answers too: a client that leaves stops the upstream mid-answer
    body["stream_options"] = {"include_usage": True}
    return path, body


def _check_output(plan: RequestPlan, spec: ModelSpec) -> None:
    output = plan.output
    if output.echo is not None:
        raise _refuse(spec, "echo", "the upstream's prompt text and tokens are not known here")
    if output.sampling_mask is not None:
        raise _refuse(spec, "sampling_mask", "the masks are token ids of this server's sampler")
    if output.logprobs is not None and not output.internal_logprobs:
        raise _refuse(spec, "logprobs", "log-probabilities are shaped from token ids of the model's vocabulary, "
                                        "which the upstream does not send")
    if output.token_ids:
        raise _refuse(spec, "return_token_ids", "the upstream does not send token ids")
    if output.internal_content:
        raise _refuse(spec, "stream_options.include_internal_content", "the upstream does not send token ids")
    if output.raw_output:
        raise _refuse(spec, "raw_output", "the prompt as the model saw it is rendered on the upstream")


def _chat(conversation: Conversation, spec: ModelSpec) -> dict[str, Any]:
    if conversation.token_ids is not None:
        raise _refuse(spec, "prompt_token_ids", "token ids of a prompt mean nothing to another server's model "
                                                "(Ollama's context is token ids too); send the messages")
    if conversation.images:
        raise _refuse(spec, conversation.images[0].where, "images are not forwarded to upstream servers yet")
    assert conversation.messages is not None
    body: dict[str, Any] = {"messages": [_message(message) for message in conversation.messages]}
    if conversation.truncate_to is not None:
        body["prompt_truncate_len"] = conversation.truncate_to
    if conversation.safe_tokenization is not None:
        body["safe_tokenization"] = conversation.safe_tokenization
    tools = conversation.tools
    if tools is not None:
        names = [tool["function"]["name"] for tool in tools.tools]
        subset = set(tools.allowed) != set(names)
        # the upstream offers only the tools a call may use: the model cannot call the others anyway
        body["tools"] = [tool for tool in tools.tools if not subset or tool["function"]["name"] in tools.allowed]
        if tools.mode == "required" and len(tools.allowed) == 1:
            body["tool_choice"] = {"type": "function", "function": {"name": tools.allowed[0]}}
        else:
            body["tool_choice"] = tools.mode
        if not tools.parallel:
            body["parallel_tool_calls"] = False
    return body


def _message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as OpenAI's API takes it: its known keys, empty ones left out, call arguments as
    JSON text."""
    out = {key: message[key] for key in MESSAGE_KEYS if message.get(key) is not None}
    if "reasoning_content" in out and not out["reasoning_content"]:
        del out["reasoning_content"]
    if "tool_calls" in out:
        out["tool_calls"] = [_call(call) for call in out["tool_calls"]]
    out.setdefault("content", "")
    return out


def _call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        function["arguments"] = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    out = {"type": "function", "function": function}
    if call.get("id"):
        out["id"] = call["id"]
    return out


def _prompts(prompts: Prompts, spec: ModelSpec) -> list[str]:
    if any(prompts.images):
        raise _refuse(spec, "images", "images are not forwarded to upstream servers yet")
    if prompts.keep_last is not None:
        raise _refuse(spec, "truncate", "it counts tokens of this server's tokenizer")
    texts = []
    for prompt in prompts.prompts:
        if not isinstance(prompt, str):
            raise _refuse(spec, "prompt", "token ids of a prompt mean nothing to another server's model; send text")
        texts.append(prompt)
    return texts


def _schema(value: dict[str, Any] | str, spec: ModelSpec) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise BadRequest("response_format: the schema is not valid JSON", param="response_format") from None
    if not isinstance(value, dict):
        raise BadRequest("response_format: the schema must be a JSON object", param="response_format")
    return value


def _response_format(given: ResponseFormat, spec: ModelSpec) -> dict[str, Any]:
    if given.type == "grammar":
        raise _refuse(spec, "response_format", "a GBNF grammar is llama.cpp's; OpenAI-compatible servers take a "
                                               "JSON schema (type json_schema)")
    if given.json_schema is not None:
        wrapper = _schema(given.json_schema, spec)
        if "schema" not in wrapper:  # a bare schema where OpenAI's wrapper goes
            wrapper = {"name": "schema", "schema": wrapper}
        return {"type": "json_schema", "json_schema": {"name": "schema", **wrapper}}
    if given.schema is not None:
        return {"type": "json_schema", "json_schema": {"name": "schema", "schema": _schema(given.schema, spec)}}
    return {"type": "json_object"}


def _reasoning(plan: RequestPlan, body: dict[str, Any]) -> None:
    """The reasoning controls in the fields they came in: a token budget as `thinking`, an effort
    as `reasoning_effort`."""
    reasoning = plan.reasoning
    if reasoning is None:
        return
    if reasoning.budget_tokens is not None:
        thinking: dict[str, Any] = {"type": "enabled", "budget_tokens": reasoning.budget_tokens}
        if reasoning.budget_end is not None:
            thinking["budget_end_str"] = reasoning.budget_end
        body["thinking"] = thinking
    elif reasoning.effort == "adaptive":
        body["thinking"] = {"type": "adaptive"}
    elif reasoning.effort is not None:
        body["reasoning_effort"] = reasoning.effort
    if reasoning.history is not None:
        body["reasoning_history"] = reasoning.history
