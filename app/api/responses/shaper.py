"""The engine's events as a Responses answer: one `Response` object, or its stream of events.

The model's output is parsed by its chat format into reasoning, content and tool calls (as for
chat); `ItemBuilder` turns those into output items (`reasoning`, `message`, `function_call`) and
the events that open, fill and close each one. A whole answer runs the same builder over the
whole text and keeps only the items.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
from litestar.response import Response as HttpResponse

from app.api.common.logprobs import LogprobShaper, token_texts
from app.api.common.outputs import NewLogProbs
from app.api.common.violations import AnswerWatch
from app.api.responses.items import new_item_id, seal_reasoning
from app.api.responses.objects import (
    ArgumentsDeltaEvent,
    ArgumentsDoneEvent,
    ContentPartEvent,
    FunctionCallItem,
    IncompleteDetails,
    InputTokensDetails,
    MessageItem,
    OutputItem,
    OutputItemEvent,
    OutputTextPart,
    OutputTokensDetails,
    ReasoningItem,
    ReasoningTextPart,
    Response,
    ResponseError,
    ResponseEvent,
    ResponseUsage,
    StreamEvent,
    TextDeltaEvent,
    TextDoneEvent,
)
from app.pipeline.errors import ApiError
from app.pipeline.output import OutputReader
from app.pipeline.prepare import PreparedRequest
from app.pipeline.run import ChoiceResult
from app.pipeline.stream_buffer import Entry, Piece
from app.pipeline.usage import UsageCounter
from templates.chat_output import OutputEvent, new_call_id


def _brief(logprobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Log-probabilities as the text events carry them (without the bytes the output part has)."""
    return [{"token": entry["token"], "logprob": entry["logprob"],
             "top_logprobs": [{"token": top["token"], "logprob": top["logprob"]} for top in entry["top_logprobs"]]}
            for entry in logprobs]


def _own_tokens(text: str, pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last of the pending tokens whose bytes end `text`: the delta's own tokens (those
    before them were markup the parser swallowed, such as a closing `</think>`)."""
    wanted, tail, start = text.encode(), b"", len(pending)
    while start:
        longer = bytes(pending[start - 1]["bytes"]) + tail
        if not wanted.endswith(longer):
            break
        tail, start = longer, start - 1
    return pending[start:]


@dataclass
class _Open:
    """The output item being written."""

    kind: str  # "message" | "reasoning" | "function_call"
    id: str
    index: int
    parts: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    call_index: int = -1  # the parser's index of the call
    logprobs: list[dict[str, Any]] = field(default_factory=list)  # a message's tokens

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class ItemBuilder:
    """Output items from the parser's events, one open at a time, and the stream events for each
    step; `sequence` numbers every event of the response (the builder's and the shaper's)."""

    seal: bool  # reasoning items carry `encrypted_content`
    items: list[OutputItem] = field(default_factory=list)
    sequence: int = 0
    current: _Open | None = None
    held: str = ""  # whitespace between items, kept until text follows it
    # Log-probabilities of the tokens fed since the last delta: the next content delta takes its
    # own (`_own_tokens`); reasoning and call deltas, and markup the parser swallows, drop them.
    pending: list[dict[str, Any]] = field(default_factory=list)

    def next_number(self) -> int:
        number, self.sequence = self.sequence, self.sequence + 1
        return number

    @property
    def reasoning_text(self) -> str:
        return "".join(part.text for item in self.items if isinstance(item, ReasoningItem) for part in item.content)

    def feed(self, events: list[OutputEvent]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for event in events:
            if event.kind == "content":
                out += self._content(event.text)
            elif event.kind == "reasoning":
                if self.current is None or self.current.kind != "reasoning":
                    out += self._open("reasoning")
                out += self._delta(event.text)
            elif event.name is not None or self.current is None or self.current.call_index != event.index:
                out += self._open("function_call", call_id=event.id or new_call_id(), name=event.name or "",
                                  call_index=event.index)
                out += self._delta(event.text)
            else:
                out += self._delta(event.text)
        return out

    def _content(self, text: str) -> list[StreamEvent]:
        if self.current is not None and self.current.kind == "message":
            return self._delta(text)
        if not (self.held + text).strip():
            self.held += text
            return []
        text, self.held = self.held + text, ""
        return self._open("message") + self._delta(text)

    def _open(self, kind: str, call_id: str = "", name: str = "", call_index: int = -1) -> list[StreamEvent]:
        pending = self.pending  # the new item's own tokens, not the closed one's
        out = self.close("completed")
        self.held, self.pending = "", pending
        item_id = new_item_id(kind)
        opened = self.current = _Open(kind, item_id, len(self.items), call_id=call_id, name=name,
                                      call_index=call_index)
        item: OutputItem
        if kind == "message":
            item = MessageItem(item_id, "in_progress", [])
        elif kind == "reasoning":
            item = ReasoningItem(item_id, [], [], "in_progress")
        else:
            item = FunctionCallItem(item_id, opened.call_id, opened.name, "", "in_progress")
        out.append(OutputItemEvent(type="response.output_item.added", sequence_number=self.next_number(),
                                   output_index=opened.index, item=item))
        if kind != "function_call":
            part = OutputTextPart("") if kind == "message" else ReasoningTextPart("")
            out.append(ContentPartEvent(type="response.content_part.added", sequence_number=self.next_number(),
                                        item_id=item_id, output_index=opened.index, content_index=0, part=part))
        return out

    def _delta(self, text: str) -> list[StreamEvent]:
        opened = self.current
        assert opened is not None
        if not text:
            return []
        opened.parts.append(text)
        taken, self.pending = _own_tokens(text, self.pending), []
        if opened.kind == "function_call":
            return [ArgumentsDeltaEvent(sequence_number=self.next_number(), item_id=opened.id,
                                        output_index=opened.index, delta=text)]
        message = opened.kind == "message"
        if message:
            opened.logprobs += taken
        return [TextDeltaEvent(type="response.output_text.delta" if message else "response.reasoning_text.delta",
                               sequence_number=self.next_number(), item_id=opened.id, output_index=opened.index,
                               content_index=0, delta=text, logprobs=_brief(taken) if message else msgspec.UNSET)]

    def close(self, status: str) -> list[StreamEvent]:
        """Finish the open item (if any) with `status`: its done events, and the item kept."""
        opened, self.current = self.current, None
        self.pending = []
        if opened is None:
            return []
        text, at = opened.text, {"item_id": opened.id, "output_index": opened.index}
        out: list[StreamEvent] = []
        item: OutputItem
        if opened.kind == "function_call":
            out.append(ArgumentsDoneEvent(sequence_number=self.next_number(), name=opened.name, arguments=text, **at))
            item = FunctionCallItem(opened.id, opened.call_id, opened.name, text, status)  # type: ignore[arg-type]
        else:
            message = opened.kind == "message"
            part = OutputTextPart(text, logprobs=opened.logprobs) if message else ReasoningTextPart(text)
            kind = "output_text" if message else "reasoning_text"
            out.append(TextDoneEvent(type=f"response.{kind}.done", sequence_number=self.next_number(), content_index=0,
                                     text=text, logprobs=_brief(opened.logprobs) if message else msgspec.UNSET, **at))
            out.append(ContentPartEvent(type="response.content_part.done", sequence_number=self.next_number(),
                                        content_index=0, part=part, **at))
            if message:
                item = MessageItem(opened.id, status, [part])  # type: ignore[arg-type, list-item]
            else:
                item = ReasoningItem(opened.id, [], [part], status,  # type: ignore[arg-type, list-item]
                                     seal_reasoning(text) if self.seal else msgspec.UNSET)
        self.items.append(item)
        out.append(OutputItemEvent(type="response.output_item.done", sequence_number=self.next_number(),
                                   output_index=opened.index, item=item))
        return out


@dataclass
class ResponsesShaper:
    """A `Shaper` for `app.run.answer`; `final` holds the finished response (to be stored)."""

    prepared: PreparedRequest
    base: Response  # the request's settings echoed, status in_progress, no output
    builder: ItemBuilder
    parser: OutputReader | None = None
    final: Response | None = None
    logprobs: LogprobShaper | None = None
    watch: AnswerWatch = field(init=False)

    def __post_init__(self) -> None:
        self.watch = AnswerWatch(self.prepared.check)
        options, job = self.prepared.plan.output, self.prepared.job
        if options.logprobs is not None:
            self.logprobs = LogprobShaper(token_texts(self.prepared.served.model), legacy=False,
                                          top=options.top_logprobs, special_text=job.special_text)

    def _feed(self, piece: Piece) -> list[StreamEvent]:
        entries = piece.logprobs
        if self.logprobs is not None and entries:
            shaped = self.logprobs.shape(0, entries)
            assert isinstance(shaped, NewLogProbs)
            self.builder.pending += [
                {"token": c.token, "bytes": c.bytes, "logprob": c.logprob,
                 "top_logprobs": [{"token": t.token, "bytes": t.bytes, "logprob": t.logprob} for t in c.top_logprobs]}
                for c in shaped.content]
        return self._items(self._output().feed(piece))

    def _items(self, events: list[OutputEvent]) -> list[StreamEvent]:
        self.watch.saw(0, events)
        return self.builder.feed(events)

    def _output(self) -> OutputReader:
        if self.parser is None:
            self.parser = self.prepared.output_parser()
        return self.parser

    def _event(self, kind: str, response: Response) -> ResponseEvent:
        return ResponseEvent(type=f"response.{kind}", sequence_number=self.builder.next_number(), response=response)

    def _finish(self, reason: str, counter: UsageCounter) -> Response:
        incomplete = reason == "length"
        reasoning = self.builder.reasoning_text
        reasoning_tokens = 0
        if reasoning and self.prepared.served is not None:  # an upstream's reasoning is not counted here
            model = self.prepared.served.model
            reasoning_tokens = min(len(model.tokenize(reasoning, add_special=False, parse_special=False)),
                                   counter.completion_tokens)
        usage = ResponseUsage(
            counter.prompt_tokens, InputTokensDetails(counter.cached_tokens, counter.prompt_tokens - counter.cached_tokens),
            counter.completion_tokens, OutputTokensDetails(reasoning_tokens), counter.total_tokens)
        self.final = msgspec.structs.replace(
            self.base, status="incomplete" if incomplete else "completed", output=self.builder.items, usage=usage,
            completed_at=None if incomplete else int(time.time()),
            incomplete_details=IncompleteDetails("max_output_tokens") if incomplete else None,
            schema_violations=self.watch.report(0, reason, self._output().calls))
        return self.final

    # ---- a stream ----------------------------------------------------------------------------

    def opening(self) -> list[StreamEvent]:
        return [self._event("created", self.base), self._event("in_progress", self.base)]

    def prompt_scored(self, choice: int, entries: list[Entry]) -> list[StreamEvent]:
        return []  # no prompt log-probabilities here

    def piece(self, choice: int, piece: Piece) -> list[StreamEvent]:
        return self._feed(piece)

    def finished(self, choice: int, reason: str, last: bool, counter: UsageCounter) -> list[StreamEvent]:
        out = self._items(self._output().finish())
        out += self.builder.close("incomplete" if reason == "length" else "completed")
        response = self._finish(reason, counter)
        out.append(self._event(response.status, response))
        return out

    def usage(self, counter: UsageCounter) -> None:
        return None  # the usage rides on the last event (the plan asks for no usage chunk)

    def failed(self, error: ApiError) -> ResponseEvent:
        self.final = msgspec.structs.replace(self.base, status="failed", output=self.builder.items,
                                             error=ResponseError("server_error", error.message))
        return self._event("failed", self.final)

    # ---- a whole answer ----------------------------------------------------------------------

    def whole(self, results: list[ChoiceResult], counter: UsageCounter) -> HttpResponse:
        result = results[0]
        if self.logprobs is None:
            self._feed(result.piece())
        else:  # token by token, as a stream goes, so that each token's log-probability finds its item
            for text, entries in _token_pieces(result.text, result.logprobs, self.logprobs):
                self._feed(Piece(text, logprobs=entries))
        self._items(self._output().finish())
        self.builder.close("incomplete" if result.finish_reason == "length" else "completed")
        return HttpResponse(self._finish(result.finish_reason or "stop", counter))


def _token_pieces(text: str, entries: list[Entry], shaper: LogprobShaper) -> Iterator[tuple[str, list[Entry]]]:
    """A whole answer's text cut at its tokens: each token's share of `text` (its piece, decoded
    as the engine decodes the stream), the text past the last token (if any) last."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    used = 0
    for entry in entries:
        info = shaper.texts.get(entry[0])
        size = len(decoder.decode(info.piece if shaper.special_text else info.plain))
        yield text[used:used + size], [entry]
        used += size
    if used < len(text):
        yield text[used:], []
