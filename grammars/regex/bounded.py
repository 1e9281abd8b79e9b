"""Length bounds: L(pattern) ∩ {strings of min_length..max_length code points}, as GBNF.

Structurally where one part carries all the freedom (`[a-z]+` -> `[a-z]{3,20}`, a fixed
prefix or suffix around one quantified part, alternatives each on their own); elsewhere
(two variable parts in a row, such as padding on both sides of an unanchored pattern, or a
repetition of variable-length items) the part becomes a minimal DFA (`grammars.regex.automata`)
whose states are paired with the number of characters read so far, written as right-linear
rules."""

from __future__ import annotations

from grammars.gbnf import Ranges, repeat
from grammars.regex.automata import Alphabet, Bound, distance_to_accept, minimal_dfa
from grammars.regex.emit import Emitter
from grammars.regex.errors import too_complex
from grammars.regex.nodes import Alt, Node, Repeat, Seq

_MAX_PRODUCT_STATES = 3_000


def _contained(node: Node, low: int, high: Bound) -> bool:
    node_low, node_high = node.lengths
    return low <= node_low and (high is None or (node_high is not None and node_high <= high))


def _disjoint(node: Node, low: int, high: Bound) -> bool:
    node_low, node_high = node.lengths
    return (high is not None and node_low > high) or (node_high is not None and node_high < low)


def _fixed(node: Node) -> bool:
    return node.lengths[0] == node.lengths[1]


def _splits(node: Node, low: int, high: Bound) -> bool:
    """Whether `Bounded.node` handles the node without a product automaton at its top."""
    if _contained(node, low, high) or _disjoint(node, low, high):
        return True
    match node:
        case Seq(items):
            return sum(not _fixed(item) for item in items) <= 1
        case Repeat(item, _, _):
            return _fixed(item)
    return True  # Alt splits into its options


class Bounded:
    """GBNF for a node's language restricted to lengths `low`..`high` (None: unbounded)."""

    def __init__(self, emitter: Emitter):
        self.emitter = emitter
        self.builder = emitter.builder

    def union(self, options: list[Node], low: int, high: Bound, hint: str = "alt") -> str | None:
        parts: list[str] = []
        rest: list[Node] = []
        for option in options:
            if _splits(option, low, high):
                part = self.node(option, low, high)
                if part is not None:
                    parts.append(part)
            else:
                rest.append(option)
        if rest:  # one automaton for all of them
            part = self.product(rest[0] if len(rest) == 1 else Alt(tuple(rest)), low, high)
            if part is not None:
                parts.append(part)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else self.builder.rule(hint, " | ".join(parts))

    def node(self, node: Node, low: int, high: Bound) -> str | None:
        if _contained(node, low, high):
            return self.emitter.emit(node)
        if _disjoint(node, low, high):
            return None
        match node:
            case Alt(options):
                return self.union(list(options), low, high)
            case Seq(items):
                variable = [i for i, item in enumerate(items) if not _fixed(item)]
                if len(variable) == 1:
                    index = variable[0]
                    fixed = sum(item.lengths[0] for i, item in enumerate(items) if i != index)
                    inner = self.node(items[index], max(0, low - fixed), None if high is None else high - fixed)
                    if inner is None:
                        return None
                    before = self.emitter.sequence(items[:index]) if index else '""'
                    after = self.emitter.sequence(items[index + 1 :]) if index + 1 < len(items) else '""'
                    return _join(before, inner, after)
            case Repeat(item, count_low, count_high) if _fixed(item):
                size = item.lengths[0]  # > 0, or the node would be contained or disjoint
                count_low = max(count_low, -(-low // size))
                if high is not None:
                    count_high = high // size if count_high is None else min(count_high, high // size)
                if count_high is not None and count_low > count_high:
                    return None
                return repeat(self.builder, self.emitter.emit(item), count_low, count_high)
        return self.product(node, low, high)

    def product(self, node: Node, low: int, high: Bound) -> str | None:
        """Right-linear rules for pairs (DFA state, characters read), the count capped at
        `high`, or at `low` when there is no upper bound."""
        alphabet = Alphabet(node)
        dfa = minimal_dfa(node, alphabet, high)
        if dfa is None:
            return None
        cap = high if high is not None else low
        # a tail state accepts and only loops on itself: what follows it is any string of its
        # loop characters, and a repetition writes that for every count at once
        tails: dict[int, Ranges] = {
            state: alphabet.union(list(row))
            for state, row in enumerate(dfa.moves)
            if dfa.accepting[state] and all(t == state for t in row.values())
        }
        distance = distance_to_accept(dfa)

        def next_count(count: int) -> int | None:
            if high is None:
                return min(count + 1, cap)
            return count + 1 if count < high else None

        def tail_fits(state: int, count: int) -> bool:
            return bool(tails[state]) or count >= low

        # the pairs reachable from the start that may still reach an accepting pair
        if dfa.start in tails:
            return self.tail(tails[dfa.start], 0, low, high) if tail_fits(dfa.start, 0) else None
        pairs: dict[tuple[int, int], None] = {(dfa.start, 0): None}
        queue = [(dfa.start, 0)]
        for state, count in queue:
            following = next_count(count)
            if following is None:
                continue
            for target in dict.fromkeys(dfa.moves[state].values()):
                pair = (target, following)
                if target in tails or pair in pairs:
                    continue
                if high is not None and distance[target] > high - following:
                    continue
                pairs[pair] = None
                queue.append(pair)
                if len(pairs) > _MAX_PRODUCT_STATES:
                    raise too_complex(f"more than {_MAX_PRODUCT_STATES} combinations of pattern position and length")

        # bodies from the longest count down: the targets of a pair come first, except
        # at the cap without an upper bound, where the pairs loop among themselves
        ordered = sorted(pairs, key=lambda pair: (-pair[1], pair[0]))
        expressions: dict[tuple[int, int], str | None] = {}
        looping = {pair for pair in ordered if high is None and pair[1] == cap}
        for state, count in sorted(looping):
            expressions[(state, count)] = self.builder.reserve(f"len-{state}-{count}")
        tail_expressions: dict[tuple[int, int], str | None] = {}

        def target_expression(state: int, count: int) -> str | None:
            if state in tails:
                key = (state, count)
                if key not in tail_expressions:
                    tail_expressions[key] = (
                        self.tail(tails[state], count, low, high) if tail_fits(state, count) else None
                    )
                return tail_expressions[key]
            return expressions.get((state, count))

        for state, count in ordered:
            following = next_count(count)
            by_target: dict[str, list[int]] = {}
            if following is not None:
                for atom, target in dfa.moves[state].items():
                    expression = target_expression(target, following)
                    if expression is not None:
                        by_target.setdefault(expression, []).append(atom)
            alternatives = [
                _join(self.emitter.char_set(alphabet.union(atoms)), expression)
                for expression, atoms in by_target.items()
            ]
            if dfa.accepting[state] and count >= low:
                alternatives.append('""')
            body = " | ".join(alternatives)
            if (state, count) in looping:
                self.builder.define(expressions[(state, count)], body)  # type: ignore[arg-type]
            elif not alternatives:
                expressions[(state, count)] = None  # cannot reach an accepting pair
            elif body == '""':
                expressions[(state, count)] = '""'
            else:
                expressions[(state, count)] = self.builder.rule(f"len-{state}-{count}", body)
        return expressions[(dfa.start, 0)]

    def tail(self, ranges: Ranges, count: int, low: int, high: Bound) -> str:
        """Any string of `ranges` characters that brings `count` within the bounds."""
        if not ranges:
            return '""'
        return repeat(
            self.builder,
            self.emitter.char_set(ranges),
            max(0, low - count),
            None if high is None else high - count,
        )


def _join(*parts: str) -> str:
    kept = [part for part in parts if part != '""']
    return " ".join(kept) if kept else '""'
