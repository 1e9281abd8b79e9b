"""Room for a reasoning block before a constrained answer.

A reasoning model writes its thinking first; a grammar for the answer alone would forbid it (or,
where the prompt opened the block, force the answer into the reasoning). The grammar built here
takes the reasoning as free text that cannot contain the end marker, then the marker, a little
whitespace, and then the answer's own grammar, whose `root` rule is left untouched. Exact, so
decoding stays fail-closed, and without llama.cpp's lazy grammars (which would leave an answer
unconstrained when the model skips its reasoning).
"""

from __future__ import annotations

from grammars.gbnf import GrammarBuilder, char_class, complement, literal, normalize

ROOT = "fireside-root"
OPTIONAL_ROOT = "fireside-optional"
_GAP = '[ \\t\\n]{0,4}'  # the model's layout between its reasoning and its answer


def with_reasoning_first(grammar: str, *, start: str | None, end: str, inner: str = "root") -> str:
    """`grammar` (rule `inner`) preceded by a reasoning block: optional when it opens with
    `start`, required (already open) when `start` is None. The new root rule is `ROOT`."""
    builder = GrammarBuilder()
    block = f"{text_without(builder, end, hint='fireside-thought')} {literal(end)} {_GAP}"
    if start is not None:
        block = f"( {literal(start)} {block} )?"
    return grammar.rstrip("\n") + "\n" + builder.render(f"{block} {inner}", root=ROOT)


def with_free_text_first(grammar: str, *, opener: str) -> str:
    """Free text, or free text followed by a sentence of `grammar` (rule `root`), which starts
    with `opener`: the text before cannot contain the opener, so once the model writes it, the
    rest must follow the grammar (`tool_choice: auto`). The new root rule is `OPTIONAL_ROOT`."""
    builder = GrammarBuilder()
    return grammar.rstrip("\n") + "\n" + builder.render(
        f"{text_without(builder, opener, hint='fireside-free')} root?", root=OPTIONAL_ROOT)


def text_without(builder: GrammarBuilder, marker: str, *, hint: str = "fireside-text") -> str:
    """Any text that does not contain `marker` (a right-linear rule per matched prefix length,
    the transitions of Knuth-Morris-Pratt)."""
    if not marker:
        raise ValueError("empty marker")
    names = [builder.reserve(f"{hint}-{i}") for i in range(len(marker))]
    for i, name in enumerate(names):
        targets: dict[int, list[int]] = {}
        for char in set(marker):
            state = _next_state(marker, i, char)
            if state < len(marker):
                targets.setdefault(state, []).append(ord(char))
        options = ['""']
        for state, codes in sorted(targets.items()):
            options.append(f"{char_class([(c, c) for c in sorted(codes)])} {names[state]}")
        others = complement(normalize((ord(c), ord(c)) for c in set(marker)))
        if others:
            options.append(f"{char_class(others)} {names[0]}")
        builder.define(name, " | ".join(options))
    return names[0]


def _next_state(marker: str, matched: int, char: str) -> int:
    """How much of `marker` is matched after `char`, when `matched` characters were."""
    text = marker[:matched] + char
    for length in range(min(len(text), len(marker)), 0, -1):
        if text.endswith(marker[:length]):
            return length
    return 0

