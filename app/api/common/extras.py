"""What a choice carries besides its text, when the request asks: logprobs (prompt and
completion), token ids, `raw_output`, `perf_metrics`, and the answer's `usage`.

Both endpoints, whole answers and streams, build these fields through one `ChoiceExtras` per
request, so the rules (which shape, where offsets start, what raw output holds) live here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from msgspec import UNSET, UnsetType

from app.api.common.logprobs import LogprobShaper, merge_logprobs, token_texts
from app.api.common.outputs import ChoiceLogprobs, NewLogProbs, RawOutput, UsageInfo
from app.api.common.perf_metrics import perf_headers, perf_metrics
from app.api.common.timings import Timings, timings
from app.pipeline.plan import ECHO_ALL, OutputOptions
from app.pipeline.prepare import PreparedRequest
from app.pipeline.prompts import Fragments
from app.pipeline.run import ChoiceResult
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import RequestClock, UsageCounter
from backends.jobs import GenerationJob
from backends.llama_model import LlamaModel
from backends.registry import ServedModel


@dataclass
class _Streamed:
    """A streamed choice's tokens so far, for its `raw_output` at the end."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[Entry] = field(default_factory=list)


def echo_text(tokens: tuple[int, ...], text: str, echo: int, model: LlamaModel) -> str:
    """The prompt as `text` (`echo`), or its last N tokens as text (`echo_last`)."""
    if echo == ECHO_ALL or echo >= len(tokens):
        return text
    return model.detokenize(list(tokens[len(tokens) - echo:])) if echo else ""


@dataclass
class ChoiceExtras:
    options: OutputOptions
    served: ServedModel | None  # None: an upstream answers
    job: GenerationJob
    clock: RequestClock
    fragments: list[Fragments]  # per prompt: what `raw_output.prompt_fragments` shows
    echoes: list[str] | None  # per prompt: the echoed text (`echo`, `echo_last`)
    grammar_text: str | None
    shaper: LogprobShaper | None = None
    raw_shaper: LogprobShaper | None = None
    streamed: dict[int, _Streamed] = field(default_factory=dict)
    _offsets_started: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, prepared: PreparedRequest, clock: RequestClock) -> ChoiceExtras:
        options, served, job = prepared.plan.output, prepared.served, prepared.job
        echoes = None
        if options.echo is not None and prepared.local is not None:  # (echo is refused for an upstream)
            echoes = [echo_text(spec.tokens, prompt.text, options.echo, prepared.local.served.model)
                      for spec, prompt in zip(job.prompts, prepared.local.prompts, strict=True)]
        extras = cls(options, served, job, clock, prepared.fragments, echoes,
                     job.grammar.text if job.grammar is not None else None)
        if options.logprobs is not None and served is not None:  # an upstream's answer has no scores to shape
            texts = token_texts(served.model)
            extras.shaper = LogprobShaper(texts, legacy=options.legacy_logprobs, top=options.top_logprobs,
                                          mask=options.sampling_mask, special_text=job.special_text)
            if options.raw_output:
                extras.raw_shaper = LogprobShaper(texts, legacy=False, top=options.top_logprobs,
                                                  mask=options.sampling_mask, special_text=job.special_text)
        return extras

    def echo(self, choice: int) -> str:
        """The text that comes before the choice's completion ("" without echo)."""
        return self.echoes[choice // self.job.n] if self.echoes else ""

    @property
    def choice_count(self) -> int:
        return self.job.choice_count

    @property
    def scores_prompt(self) -> bool:
        """Echoed prompts come with log-probabilities (sent when the engine has scored them)."""
        return self.options.logprobs is not None and self.options.logprobs.prompt_last > 0

    @property
    def per_token(self) -> bool:
        """Chunks carry something for every token, even while its text is held back."""
        return self.options.token_ids or self.options.internal_content or self.shaper is not None

    def _prompt_tokens(self, choice: int) -> list[int]:
        return list(self.job.prompts[choice // self.job.n].tokens)

    # ---- logprobs ---------------------------------------------------------------------------

    def prompt_logprobs(self, choice: int, entries: list[Entry]) -> ChoiceLogprobs:
        """The echoed prompt's positions; the completion's offsets then start after the echo."""
        if self.shaper is None:
            return None
        self.shaper.set_offset(choice, 0)
        # A BOS the tokenizer put before a text prompt is no character of the echoed text: its
        # position takes no room in the offsets (its plain piece is empty).
        head = 1 if entries and self._bos_outside_echo(choice, entries) else 0
        shaped = self.shaper.shape(choice, entries[:head], special_text=False) if head else None
        shaped = merge_logprobs(shaped, self.shaper.shape(choice, entries[head:], special_text=True))
        self._start_completion(choice)
        return shaped

    def _bos_outside_echo(self, choice: int, entries: list[Entry]) -> bool:
        """Whether the echoed positions begin with the prompt's BOS and the echoed text does not."""
        model = self.served.model
        token = entries[0][0]
        return (model.add_bos and token == model.bos_token_id and len(entries) == len(self._prompt_tokens(choice))
                and not self.echo(choice).startswith(model.token_text(token)))

    def logprobs(self, choice: int, entries: list[Entry]) -> ChoiceLogprobs:
        if self.shaper is None:
            return None
        if choice not in self._offsets_started:
            self._start_completion(choice)
        return self.shaper.shape(choice, entries)

    def _start_completion(self, choice: int) -> None:
        assert self.shaper is not None
        self.shaper.set_offset(choice, len(self.echo(choice)))
        self._offsets_started.add(choice)

    def whole_logprobs(self, choice: int, result: ChoiceResult) -> ChoiceLogprobs:
        if self.shaper is None:
            return None
        prompt = self.prompt_logprobs(choice, result.prompt_logprobs) if result.prompt_logprobs else None
        return merge_logprobs(prompt, self.logprobs(choice, result.logprobs))

    # ---- token ids ----------------------------------------------------------------------------

    def prompt_ids(self, choice: int) -> list[int] | UnsetType:
        return self._prompt_tokens(choice) if self.options.token_ids else UNSET

    def token_ids(self, tokens: list[int]) -> list[int] | UnsetType:
        return tokens if self.options.token_ids else UNSET

    # ---- raw output ----------------------------------------------------------------------------

    def observe(self, choice: int, piece: Piece) -> None:
        """Keep a streamed choice's tokens for its raw output (only when asked for)."""
        if self.options.raw_output:
            streamed = self.streamed.setdefault(choice, _Streamed())
            streamed.tokens.extend(piece.tokens)
            streamed.logprobs.extend(piece.logprobs)

    def raw_output(self, choice: int, tokens: list[int], entries: list[Entry]) -> RawOutput | UnsetType:
        if not self.options.raw_output:
            return UNSET
        completion_logprobs = None
        if self.raw_shaper is not None:
            shaped = self.raw_shaper.shape(choice, entries)
            assert isinstance(shaped, NewLogProbs)
            completion_logprobs = shaped
        return RawOutput(
            prompt_fragments=self.fragments[choice // self.job.n],
            prompt_token_ids=self._prompt_tokens(choice),
            completion=self.served.model.detokenize(tokens, special=True),
            completion_token_ids=tokens,
            completion_logprobs=completion_logprobs,
            grammar=self.grammar_text,
        )

    def whole_raw_output(self, choice: int, result: ChoiceResult) -> RawOutput | UnsetType:
        return self.raw_output(choice, result.tokens, result.logprobs)

    def stream_raw_output(self, choice: int) -> RawOutput | UnsetType:
        streamed = self.streamed.pop(choice, _Streamed())
        return self.raw_output(choice, streamed.tokens, streamed.logprobs)

    # ---- usage and perf metrics ------------------------------------------------------------------

    @staticmethod
    def usage(counter: UsageCounter) -> UsageInfo:
        return UsageInfo.of(counter.prompt_tokens, counter.completion_tokens, counter.cached_tokens)

    def perf(self, counter: UsageCounter) -> dict[str, object]:
        return perf_metrics(self.clock, counter, len(self.job.draft),
                            drafting_model=self.served is not None and self.served.engine.draft_model is not None)

    def stream_perf(self, counter: UsageCounter) -> dict[str, object] | UnsetType:
        return self.perf(counter) if self.options.perf_in_body else UNSET

    def body_perf(self, metrics: dict[str, object]) -> dict[str, object] | UnsetType:
        return metrics if self.options.perf_in_body else UNSET

    def timings(self, counter: UsageCounter) -> Timings | UnsetType:
        """llama.cpp's `timings` when asked for (`timings_per_token`)."""
        return timings(self.clock, counter) if self.options.timings else UNSET

    @staticmethod
    def headers(metrics: dict[str, object]) -> dict[str, str]:
        return perf_headers(metrics)
