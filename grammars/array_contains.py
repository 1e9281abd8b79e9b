"""Arrays under `contains`: at least one item is also valid under the `contains` schema.

Written as items before, one marked item (valid under both `items` and `contains`), and items
after: every array with a matching item has such a split (mark any matching item), so the
grammar is exact, and ambiguity does not matter to a grammar sampler. Counts: `minItems` and
`maxItems` are kept by enumerating how many items come before the marked one.
"""

from __future__ import annotations

from grammars.gbnf import GrammarBuilder, repeat

MAX_ENUMERATED = 64  # items before the marked one, written out one alternative each


def containing_items(builder: GrammarBuilder, item: str, marked: str, comma: str, min_items: int,
                     max_items: int | None) -> str | None:
    """The non-empty item sequences with at least one `marked` item and a count within the bounds
    (`comma`: the separator expression); None when the bounds need too many alternatives."""
    limit = max_items if max_items is not None else max(min_items, 1)
    if limit > MAX_ENUMERATED:
        return None
    before = builder.rule("item-then", f"{item} {comma}")
    after = builder.rule("item-more", f"{comma} {item}")
    options = []
    for count in range(limit):  # items before the marked one
        low = max(0, min_items - 1 - count)
        high = None if max_items is None else max_items - 1 - count
        if max_items is None and count == limit - 1:  # the last: any number before, any after
            lead = repeat(builder, before, count, None)
        else:
            lead = repeat(builder, before, count, count)
        options.append(" ".join(part for part in (lead, marked, repeat(builder, after, low, high)) if part != '""'))
    return builder.rule("contains", " | ".join(options))
