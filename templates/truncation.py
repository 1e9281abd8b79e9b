"""`prompt_truncate_len`: the conversation cut down until its prompt fits a number of tokens.

The earliest messages after the system prompt go first, a whole turn at a time: what is kept
starts at a user message, and a tool result goes with the assistant message that called the tool.
System messages and the last message are always kept. When even the system messages and the last
turn do not fit, the first system message loses tokens from its end, as a last resort.

Counting a candidate means rendering and tokenizing it, so candidates are found by binary search:
the prompt shrinks as more turns go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

Messages = list[dict[str, Any]]
CountTokens = Callable[[Messages], int]

_SYSTEM_ROLES = frozenset({"system", "developer"})


class TextTokenizer(Protocol):
    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...

    def detokenize(self, tokens: list[int], *, special: bool = True) -> str: ...


@dataclass(frozen=True)
class Truncation:
    messages: Messages  # the conversation to send
    prompt_tokens: int  # its prompt's length as `count_tokens` measured it
    evicted: int  # messages left out
    system_tokens_cut: int  # tokens cut from the end of the first system message's content
    fits: bool  # prompt_tokens <= limit; false when even the shortest conversation is too long

    @property
    def changed(self) -> bool:
        return self.evicted > 0 or self.system_tokens_cut > 0


def truncate_conversation(messages: Messages, count_tokens: CountTokens, limit: int,
                          tokenizer: TextTokenizer) -> Truncation:
    """The conversation whose prompt fits in `limit` tokens, with as much of the history as fits.

    `count_tokens(messages)` is the prompt length of a conversation (render and tokenize it, with
    the request's tools and template variables); `tokenizer` (the model) cuts the system prompt.
    When nothing fits, the shortest conversation comes back with `fits` false.
    """
    total = count_tokens(messages)
    if total <= limit:
        return Truncation(messages, total, 0, 0, True)
    levels = eviction_levels(messages)
    if not levels:
        return _cut_system(messages, count_tokens, limit, tokenizer, evicted=0, tokens=total)
    last = levels[-1]
    last_count = count_tokens(last)
    if last_count > limit:
        return _cut_system(last, count_tokens, limit, tokenizer, evicted=len(messages) - len(last), tokens=last_count)
    # the fewest turns evicted that fit: levels[hi] fits, everything before `lo` does not
    lo, hi, hi_count = 0, len(levels) - 1, last_count
    while lo < hi:
        mid = (lo + hi) // 2
        count = count_tokens(levels[mid])
        if count <= limit:
            hi, hi_count = mid, count
        else:
            lo = mid + 1
    kept = levels[hi]
    return Truncation(kept, hi_count, len(messages) - len(kept), 0, True)


def eviction_levels(messages: Messages) -> list[Messages]:
    """The conversations with ever more of the history left out, shortest last: each keeps the
    system messages and the messages from one user message on, less the tool results of calls it
    left out. A level that would lose the last message is skipped."""
    conversation = [i for i, m in enumerate(messages) if m.get("role") not in _SYSTEM_ROLES]
    starts = [i for i in conversation[1:] if messages[i].get("role") == "user"]
    levels = []
    for start in starts:
        kept = _from(messages, start)
        if kept and kept[-1] is messages[-1]:
            levels.append(kept)
    return levels


def _from(messages: Messages, start: int) -> Messages:
    left_out = messages[:start]
    dropped_calls = _call_ids(m for m in left_out if m.get("role") not in _SYSTEM_ROLES)
    kept_calls = _call_ids(messages[start:])
    orphaned = dropped_calls - kept_calls
    return [m for m in left_out if m.get("role") in _SYSTEM_ROLES] + [
        m for m in messages[start:] if not (m.get("role") == "tool" and m.get("tool_call_id") in orphaned)]


def _call_ids(messages: Any) -> set[str]:
    ids = set()
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and call.get("id"):
                ids.add(call["id"])
    return ids


def _cut_system(messages: Messages, count_tokens: CountTokens, limit: int, tokenizer: TextTokenizer, *,
                evicted: int, tokens: int) -> Truncation:
    """The conversation with the first system message's content cut to the most tokens that fit
    (possibly none)."""
    index = next((i for i, m in enumerate(messages) if m.get("role") in _SYSTEM_ROLES), None)
    content = messages[index].get("content") if index is not None else None
    if index is None or not isinstance(content, str) or not content:
        return Truncation(messages, tokens, evicted, 0, False)
    system = tokenizer.tokenize(content, add_special=False, parse_special=False)

    def cut(keep: int) -> Messages:
        shorter = dict(messages[index], content=_prefix_text(tokenizer, system, keep))
        return [*messages[:index], shorter, *messages[index + 1:]]

    # the most system tokens that fit: `lo` fits (or is 0), everything above `hi` does not
    lo, hi = 0, len(system) - 1
    best = cut(0)
    best_count = count_tokens(best)
    if best_count > limit:
        return Truncation(best, best_count, evicted, len(system), False)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        candidate = cut(mid)
        count = count_tokens(candidate)
        if count <= limit:
            lo, best, best_count = mid, candidate, count
        else:
            hi = mid - 1
    return Truncation(best, best_count, evicted, len(system) - lo, True)


def _prefix_text(tokenizer: TextTokenizer, tokens: list[int], keep: int) -> str:
    # a cut inside a character leaves replacement characters at the end
    return tokenizer.detokenize(tokens[:keep], special=True).rstrip("\ufffd")
