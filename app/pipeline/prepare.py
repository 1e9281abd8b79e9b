"""A request plan resolved against its loaded model into the engine's job (DESIGN steps 3 to 5):
the prompt rendered and tokenized, the completion budget fitted into the context, the grammar
compiled, the model's configured defaults applied, the reasoning budget and predicted output
turned into tokens. Rendering and grammar conversion run off the event loop (a long chat or a
big schema takes a while)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.media.fetch import DEFAULT_MEDIA, MediaPolicy
from app.pipeline.answer_check import AnswerCheck
from app.pipeline.chat_formats import chat_format
from app.pipeline.constraints import (
    Constraint,
    call_grammar,
    format_grammar,
    reasoning_first,
)
from app.pipeline.errors import BadRequest
from app.pipeline.images import (
    count_images,
    encode_images,
    place_images,
    placed_count,
    written_image_prompt,
)
from app.pipeline.output import OutputReader, ParsedOutput, SplitOutput
from app.pipeline.plan import Conversation, RequestPlan, Sampling
from app.pipeline.prompts import (
    Fragments,
    Prompt,
    answer_start,
    chat_prompt,
    check_token_ids,
    written_prompts,
)
from backends.embedder import Pooling, declared_pooling
from backends.jobs import GenerationJob, PromptSpec, SamplingParams
from backends.llama_model import LlamaModel
from backends.reasoning_budget import ReasoningBudget
from backends.registry import ServedModel
from templates.chat_format import ChatFormat
from templates.reasoning import ReasoningRequest


@dataclass(frozen=True)
class LocalPart:
    """What a request answered on a local model has besides its job: the model, the prompts as
    rendered and tokenized, the chat format whose parser reads the output, the tools a call may
    name, and what the grammar left to check in the finished answer."""

    served: ServedModel
    prompts: list[Prompt]  # one per prompt of the job
    chat: ChatFormat | None = None  # chats: the format whose parser reads the output
    tool_names: frozenset[str] | None = None  # the tools a call may name (None: no call possible)
    check: AnswerCheck | None = None


@dataclass(frozen=True)
class PreparedRequest:
    """A plan and the job that answers it, with what shaping the answer needs. `local` is None
    when an upstream server answers (`app.pipeline.upstream`): its job only counts the prompts
    and choices, and its output comes already split."""

    plan: RequestPlan
    job: GenerationJob
    local: LocalPart | None = None

    @property
    def served(self) -> ServedModel | None:
        return self.local.served if self.local is not None else None

    @property
    def check(self) -> AnswerCheck | None:
        return self.local.check if self.local is not None else None

    @property
    def chats(self) -> bool:
        """Whether the output is a chat's, read into content, reasoning and tool calls."""
        return isinstance(self.plan.input, Conversation)

    @property
    def fragments(self) -> list[Fragments]:
        """Per prompt, what `raw_output.prompt_fragments` shows (nothing for an upstream's)."""
        if self.local is None:
            return [[] for _ in self.job.prompts]
        return [prompt.fragments for prompt in self.local.prompts]

    def output_parser(self) -> OutputReader:
        """A new reader of one choice's output into content, reasoning and tool calls (chats only)."""
        local = self.local
        if local is None:
            return SplitOutput()
        assert local.chat is not None
        return ParsedOutput(local.chat.output(local.prompts[0].text, local.tool_names))


def require_generative(served: ServedModel, why: str) -> None:
    """400 for a model that declares pooling (an embedding model): `why` says what it cannot do."""
    pooling = declared_pooling(served.model)
    if pooling != Pooling.none:
        raise BadRequest(f"{served.id} is an embedding model ({pooling.name} pooling): {why}", param="model")


async def prepare(plan: RequestPlan, served: ServedModel, media: MediaPolicy = DEFAULT_MEDIA) -> PreparedRequest:
    model = served.model
    require_generative(served, "it does not generate text; use /v1/embeddings")
    chat = tool_names = None
    if plan.input.images and plan.output.logprobs is not None and plan.output.logprobs.prompt_last:
        raise BadRequest("the prompt's log-probabilities cannot be scored across images", param="echo")
    if isinstance(plan.input, Conversation):
        chat = chat_format(served)
        reasoning = plan.reasoning or ReasoningRequest()
        encoded = await encode_images(served, plan.input.images, media) if plan.input.images else []
        prompts = [await asyncio.to_thread(chat_prompt, model, chat, plan.input, reasoning)]
        if encoded:
            prompts[0] = place_images(served, prompts[0], encoded, plan.input.images)
        budget = reasoning_budget(model, chat, prompts[0].text, reasoning)
        hints = [answer_start(model, chat, prompts[0], reasoning)]
    else:
        prompts = written_prompts(plan.input.prompts, model, plan.input.keep_last)
        for i, refs in enumerate(plan.input.images):
            if refs:
                prompts[i] = written_image_prompt(model, prompts[i], await encode_images(served, refs, media), i)
        budget = written_reasoning_budget(served, plan.reasoning, [p.text for p in prompts])
        hints = [() for _ in prompts]
    requested = plan.max_tokens if plan.max_tokens is not None else served.defaults.get("max_tokens")
    specs = tuple(PromptSpec(tuple(p.tokens), fit_max_tokens(len(p.tokens), requested, plan.default_max_tokens,
                                                             served.engine.ctx_size, plan.overflow,
                                                             limit=served.engine.request_limit), p.images, hint)
                  for p, hint in zip(prompts, hints, strict=True))
    if chat is not None:
        assert isinstance(plan.input, Conversation)
        constraint = await asyncio.to_thread(_chat_constraint, served, chat, plan, prompts[0].text)
        tools = plan.input.tools
        tool_names = tools.callable if tools is not None else None
        # tool-call markup is often made of special tokens: the parser must see it as text
        special_text = chat.family.special_markers or plan.input.shown_tools is not None
    else:
        constraint = None
        if plan.response_format is not None:
            constraint = await asyncio.to_thread(format_grammar, served, plan.response_format, None)
        special_text = False
    job = GenerationJob(
        prompts=specs,
        n=plan.n,
        sampling=sampling_params(plan.sampling, model.n_vocab, served.defaults),
        stop=stop_sequences(plan.stop, served.defaults) + (chat.turn_stops if chat is not None else ()),
        cache=plan.cache,
        stream=plan.stream is not None,
        grammar=constraint.grammar if constraint is not None else None,
        guard=constraint.guard if constraint is not None else None,
        special_text=special_text,
        reasoning_budget=budget,
        logprobs=plan.output.logprobs,
        draft=draft_tokens(plan.draft, model),
        priority=plan.priority,
        adapters=served.adapters,
    )
    return PreparedRequest(plan, job, LocalPart(served, prompts, chat, tool_names,
                                                constraint.check if constraint is not None else None))


async def count_chat_tokens(plan: RequestPlan, served: ServedModel, media: MediaPolicy = DEFAULT_MEDIA) -> int:
    """How many tokens the chat prompt `prepare` makes of this plan takes (messages, tools and the
    reasoning request rendered in the model's template; each image the tokens the projector makes
    of it), without what only answering needs: the projector's encoder does not run, no grammar is
    compiled, and the completion is not fitted into the context (a prompt too long to answer is
    counted all the same)."""
    assert isinstance(plan.input, Conversation)
    require_generative(served, "it does not generate text; use /v1/embeddings")
    counts = await count_images(served, plan.input.images, media) if plan.input.images else []
    prompt = await asyncio.to_thread(chat_prompt, served.model, chat_format(served), plan.input,
                                     plan.reasoning or ReasoningRequest())
    return placed_count(served, prompt, counts) if counts else len(prompt.tokens)


def _chat_constraint(served: ServedModel, chat: ChatFormat, plan: RequestPlan, prompt: str) -> Constraint | None:
    assert isinstance(plan.input, Conversation)
    tools = plan.input.tools
    if tools is not None and tools.mode != "none":
        return call_grammar(served, chat, tools, reasoning_first(chat, prompt), plan.response_format)
    if plan.response_format is None:
        return None
    return format_grammar(served, plan.response_format, reasoning_first(chat, prompt))


def fit_max_tokens(prompt_tokens: int, requested: int | None, default: int | None,
                   ctx_size: int, behavior: str, *, limit: int | None = None) -> int:
    """The completion budget of one prompt (`context_length_exceeded_behavior`).

    A request's window is `ctx_size` (one slot's share of the KV pool) when its prompt fits
    there, its completion cut to the room left as always (a habitual large `max_tokens` must not
    make every request wait for the whole pool); a longer prompt may take up to `limit` tokens
    (the whole pool, served when the other slots make room; see backends.kv_pool)."""
    limit = max(limit or ctx_size, ctx_size)
    wanted = requested if requested is not None else default
    window = ctx_size if prompt_tokens < ctx_size else limit
    if prompt_tokens > window:
        raise BadRequest(
            f"This model's maximum context length is {window} tokens. However, your prompt has "
            f"{prompt_tokens} tokens.",
            param="prompt", code="context_length_exceeded",
        )
    room = window - prompt_tokens
    if wanted is None:
        return room
    if wanted > room and behavior == "error":
        raise BadRequest(
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt_tokens + wanted} tokens ({prompt_tokens} in the prompt, {wanted} for the "
            "completion). Please reduce the prompt or max_tokens.",
            param="max_tokens", code="context_length_exceeded",
        )
    return min(wanted, room)


_SPEC_SAMPLING: dict[str, Any] = {
    "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "frequency_penalty": 0.0,
    "presence_penalty": 0.0, "repetition_penalty": 1.0, "mirostat_target": None, "mirostat_lr": 0.1, "seed": None,
}


def sampling_params(sampling: Sampling, n_vocab: int, defaults: Mapping[str, Any]) -> SamplingParams:
    """The request's sampling fields; one it leaves out takes the model's configured default
    (the config file's `[models.sampling]`), else the spec's."""
    values = {}
    for name, spec_default in _SPEC_SAMPLING.items():
        value = getattr(sampling, name)
        values[name] = value if value is not None else defaults.get(name, spec_default)
    for token, _ in sampling.logit_bias:
        if not 0 <= token < n_vocab:
            raise BadRequest(f"logit_bias token {token} is outside the vocabulary (0..{n_vocab - 1})", param="logit_bias")
    return SamplingParams(**values, logit_bias=sampling.logit_bias, ignore_eos=sampling.ignore_eos)


def stop_sequences(stop: tuple[str, ...] | None, defaults: Mapping[str, Any]) -> tuple[str, ...]:
    if stop is None:
        configured = defaults.get("stop")
        if configured is None:
            return ()
        stop = (configured,) if isinstance(configured, str) else tuple(configured)
    return tuple(s for s in stop if s)


def draft_tokens(draft: str | tuple[int, ...], model: LlamaModel) -> tuple[int, ...]:
    """The predicted output as tokens."""
    if isinstance(draft, tuple):
        check_token_ids(draft, model.n_vocab, "speculation")
        return draft
    if not draft:
        return ()
    return tuple(model.tokenize(draft, add_special=False, parse_special=False))


def reasoning_budget(model: LlamaModel, chat: ChatFormat, prompt: str,
                     reasoning: ReasoningRequest) -> ReasoningBudget | None:
    """What the engine needs to cap reasoning after `prompt`; None when the request sets no budget."""
    capped = chat.reasoning_budget(prompt, reasoning)
    if capped is None:
        return None
    start, end, closing = capped
    assert reasoning.budget_tokens is not None
    return ReasoningBudget(reasoning.budget_tokens, start, end,
                           tuple(model.tokenize(closing, add_special=False, parse_special=True)))


def written_reasoning_budget(served: ServedModel, reasoning: ReasoningRequest | None,
                             prompts: list[str]) -> ReasoningBudget | None:
    """Prompts used as written take, of the reasoning controls, only a token budget (an integer
    `reasoning_effort`, `thinking.budget_tokens`): the engine closes the model's reasoning block
    after that many tokens. The other controls choose how a chat template renders messages; here
    they are refused with the reason."""
    if reasoning is None:
        return None
    chat = chat_format(served)
    if not chat.family.reasons:
        raise BadRequest(f"this model's chat template has no reasoning to control: {reasoning.param} cannot be "
                         "honoured", param=reasoning.param)
    if reasoning.budget_tokens is None:
        raise BadRequest(f"{reasoning.param}: on /v1/completions the prompt is used as written, so only a reasoning "
                         "token budget (an integer reasoning_effort or thinking.budget_tokens) applies; effort "
                         "levels and on/off choose how /v1/chat/completions renders the chat template",
                         param=reasoning.param)
    budgets = {reasoning_budget(served.model, chat, prompt, reasoning) for prompt in prompts}
    if len(budgets) > 1:
        raise BadRequest("the prompts differ in whether they already open the reasoning block; send them "
                         "separately", param="prompt")
    return budgets.pop()
