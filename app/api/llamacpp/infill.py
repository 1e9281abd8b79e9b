"""llama-server's `/infill`: `/completion` with a fill-in-the-middle prompt built from the model's
FIM tokens, as `format_prompt_infill` builds it: the extra files (the repository-level pattern
where the vocabulary has FIM_REP and FIM_SEP, else each after a snippet marker), then
`<FIM_PRE>prefix prompt<FIM_SUF>suffix<FIM_MID>`. Unlike llama-server, nothing given is cut to
fit a batch: a prompt too long for the context is refused (400) with its size."""

from __future__ import annotations

from dataclasses import replace

from app.api.common.fim import NO_TOKEN, FimTokens, fim_prompt, fim_tokens
from app.api.llamacpp.plan import CompletionAnswer, completion_plan
from app.api.llamacpp.tokens import mixed_tokens
from app.api.llamacpp.wire import InfillChunk, InfillRequest
from app.pipeline.errors import BadRequest
from app.pipeline.plan import Prompts, RequestPlan
from app.pipeline.run import PlanOnModel
from backends.llama_model import LlamaModel
from backends.registry import ServedModel

PROJECT = "myproject\n"  # the repository name llama-server writes (it takes none from the request)
CURRENT_FILE = "filename\n"  # and the current file's
SNIPPET = "\n\n--- snippet ---\n\n"  # its separator where the vocabulary has no FIM_SEP


def _text(model: LlamaModel, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False)


def _extra(model: LlamaModel, fim: FimTokens, chunks: list[InfillChunk]) -> list[int]:
    tokens: list[int] = []
    if fim.rep != NO_TOKEN:
        tokens += [fim.rep, *_text(model, PROJECT)]
    for chunk in chunks:
        tokens += [fim.sep, *_text(model, chunk.filename + "\n")] if fim.sep != NO_TOKEN else _text(model, SNIPPET)
        tokens += _text(model, chunk.text)
    if fim.sep != NO_TOKEN:
        tokens += [fim.sep, *_text(model, CURRENT_FILE)]
    return tokens


def infill_plan(request: InfillRequest, model: str, max_logprobs: int) -> tuple[PlanOnModel, CompletionAnswer]:
    plan, answer = completion_plan(request, model, max_logprobs)

    async def build(served: ServedModel | None) -> RequestPlan:
        if served is None:
            raise BadRequest("/infill builds its prompt with this server's tokenizer; the model runs upstream",
                             param="model")
        base = plan if isinstance(plan, RequestPlan) else await plan.build(served)
        assert isinstance(base.input, Prompts)
        if len(base.input.prompts) != 1:
            raise BadRequest("/infill takes one prompt (the start of the middle)", param="prompt")
        fim = fim_tokens(served, "input_prefix")
        vocab_model = served.model
        middle = base.input.prompts[0]
        middle_tokens = (vocab_model.tokenize(middle, add_special=False, parse_special=True)
                         if isinstance(middle, str) else list(middle))
        prefix = mixed_tokens(vocab_model, request.input_prefix, add_special=False, parse_special=False,
                              param="input_prefix")
        suffix = mixed_tokens(vocab_model, request.input_suffix, add_special=False, parse_special=False,
                              param="input_suffix")
        extra = _extra(vocab_model, fim, request.input_extra or [])
        return replace(base, input=Prompts((fim_prompt(served, fim, [*prefix, *middle_tokens], suffix, extra),)))
    return PlanOnModel(model, build), answer
