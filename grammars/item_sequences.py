"""The sequences inside an object's or an array's brackets, as GBNF: declared properties in order
(each optional unless required) then extra ones, and prefix items then the rest, within the
counts the schema allows."""

from __future__ import annotations

from grammars.gbnf import GrammarBuilder, repeat

COMMA = '"," ws'


def _seq(*parts: str) -> str:
    kept = [p for p in parts if p and p != '""']
    return " ".join(kept) if kept else '""'


def object_items(builder: GrammarBuilder, items: list[str], required_at: list[bool], extra: str | None,
                  min_count: int, max_count: int | None) -> tuple[str | None, bool] | None:
    """The non-empty property sequences (declared in order, then extras) with a count in
    [min_count, max_count], and whether the empty object is allowed; None if nothing is."""
    n = len(items)
    saturate = max(min_count, 1)  # counts past this need no tracking without a maximum

    def clamp(count: int) -> int:
        return count if max_count is not None else min(count, saturate)

    def fits(count: int) -> bool:
        return max_count is None or count <= max_count

    required_from = [False] * (n + 1)  # whether a required property remains at index >= i
    for i in range(n - 1, -1, -1):
        required_from[i] = required_at[i] or required_from[i + 1]
    extra_sep = builder.rule("extra-more", f"{COMMA} {extra}") if extra else None

    def extras(count: int) -> str | None:
        low = max(0, min_count - count)
        high = None if max_count is None else max_count - count
        if high is not None and high < low:
            return None
        if extra is None or high == 0:
            return '""' if low == 0 else None
        if count == 0:  # the first property: no comma before it
            more = repeat(builder, extra_sep, max(low - 1, 0), None if high is None else high - 1)
            return _seq(extra, more)  # at least one: the empty object is decided by the caller
        return repeat(builder, extra_sep, low, high)

    # rest[(i, count)]: what may follow once `count` properties are written and the next
    # declared one to consider is i (a rule name, or None when nothing can).
    rest: dict[tuple[int, int], str | None] = {}
    counts = range((max_count if max_count is not None else saturate) + 1)
    for count in counts:  # past the last declared property: only extras remain
        if count:
            tail = extras(count)
            rest[(n, count)] = builder.rule("props", tail) if tail is not None else None
    for i in range(n - 1, 0, -1):
        for count in counts:
            if count == 0:
                continue
            options = []
            for j in range(i, n):
                if not fits(count + 1):
                    break
                after = rest.get((j + 1, clamp(count + 1)))
                if after is not None:
                    options.append(_seq(COMMA, items[j], after))
                if required_at[j]:
                    break
            if not required_from[i]:
                tail = extras(count)
                if tail is not None:
                    options.append(tail)
            rest[(i, count)] = builder.rule("props", " | ".join(options)) if options else None
    # the first property
    first = []
    for j in range(n):
        if not fits(1):
            break
        after = rest.get((j + 1, clamp(1)))
        if after is not None:
            first.append(_seq(items[j], after))
        if required_at[j]:
            break
    if not required_from[0] and extra is not None and fits(1):
        tail = extras(0)
        if tail is not None and tail != '""':
            first.append(tail)
    empty_allowed = not required_from[0] and min_count == 0
    if not first:
        return (None, True) if empty_allowed else None
    return builder.rule("props", " | ".join(first)), empty_allowed


def array_items(builder: GrammarBuilder, prefix: list[str], rest: str | None,
                 min_items: int, max_items: int | None) -> str | None:
    """The non-empty item sequences: prefix items in order, then `rest` items."""
    if max_items == 0 or (not prefix and rest is None):
        return None
    k = len(prefix)
    rest_sep = builder.rule("item-more", f"{COMMA} {rest}") if rest is not None else None

    def tail(count: int) -> str | None:
        """What may follow `count` written items."""
        if count < k:
            options = []
            if count >= min_items:
                options.append('""')
            if max_items is None or count + 1 <= max_items:
                after = tail(count + 1)
                if after is not None:
                    options.append(_seq(COMMA, prefix[count], after))
            return builder.rule("items", " | ".join(options)) if options else None
        low = max(0, min_items - count)
        high = None if max_items is None else max_items - count
        if rest_sep is None:
            return '""' if low == 0 else None
        return repeat(builder, rest_sep, low, high)

    first = prefix[0] if k else rest
    after = tail(1)
    if after is None:
        return None
    return builder.rule("items", _seq(first, after))
