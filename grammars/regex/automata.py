"""Minimal DFAs of anchor-free nodes, for the length-bounded product in
`grammars.regex.bounded`: the code points split into atoms (`Alphabet`), a Thompson NFA over
them, the subset construction (truncated at the upper length bound) and Moore's minimisation."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from grammars.gbnf import Ranges, normalize
from grammars.regex.errors import too_complex
from grammars.regex.nodes import Alt, CharSet, Node, Repeat, Seq

_MAX_NFA_STATES = 20_000
_MAX_DFA_STATES = 2_000
_MAX_WORK = 100_000

Bound = int | None  # an upper length bound; None: unbounded


class Alphabet:
    """The code points split into classes ("atoms") that no character set of the node tells
    apart; every character set is a union of atoms."""

    def __init__(self, node: Node):
        sets: dict[tuple[tuple[int, int], ...], None] = {}
        _collect_sets(node, sets, set())
        points = sorted({p for ranges in sets for first, last in ranges for p in (first, last + 1)})
        members: list[list[int]] = [[] for _ in points]
        for index, ranges in enumerate(sets):
            for first, last in ranges:
                for k in range(bisect_left(points, first), bisect_left(points, last + 1)):
                    members[k].append(index)
        by_signature: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for k, signature in enumerate(members):
            if signature:
                by_signature.setdefault(tuple(signature), []).append((points[k], points[k + 1] - 1))
        self.ranges: list[Ranges] = list(by_signature.values())
        atoms_of: list[list[int]] = [[] for _ in sets]
        for atom, signature in enumerate(by_signature):
            for index in signature:
                atoms_of[index].append(atom)
        self.atoms = {ranges: frozenset(atoms) for ranges, atoms in zip(sets, atoms_of)}

    def union(self, atoms: list[int]) -> Ranges:
        return normalize(r for atom in atoms for r in self.ranges[atom])


def _collect_sets(node: Node, found: dict, seen: set) -> None:
    if node in seen:
        return
    seen.add(node)
    match node:
        case CharSet(ranges):
            if ranges:
                found[ranges] = None
        case Seq(children) | Alt(children):
            for child in children:
                _collect_sets(child, found, seen)
        case Repeat(item, _, _):
            _collect_sets(item, found, seen)


class _Nfa:
    """Thompson construction over atoms; parts that cannot fit in `high` characters are left
    out, and bounded repetitions get no more copies than `high` characters can use."""

    def __init__(self, alphabet: Alphabet, high: Bound):
        self.alphabet = alphabet
        self.high = high
        self.edges: list[list[tuple[frozenset[int], int]]] = []
        self.empty: list[list[int]] = []

    def new(self) -> int:
        if len(self.edges) >= _MAX_NFA_STATES:
            raise too_complex(f"the pattern needs more than {_MAX_NFA_STATES} automaton states")
        self.edges.append([])
        self.empty.append([])
        return len(self.edges) - 1

    def build(self, node: Node, start: int) -> int:
        """Add the node after state `start`; returns its end state."""
        if self.high is not None and node.lengths[0] > self.high:
            return self.new()  # a dead end
        match node:
            case CharSet(ranges):
                end = self.new()
                if ranges:
                    self.edges[start].append((self.alphabet.atoms[ranges], end))
                return end
            case Seq(items):
                for item in items:
                    start = self.build(item, start)
                return start
            case Alt(options):
                end = self.new()
                for option in options:
                    entry = self.new()
                    self.empty[start].append(entry)
                    self.empty[self.build(option, entry)].append(end)
                return end
            case Repeat(item, low, high):
                return self.repetition(item, low, high, start)
        raise TypeError(node)

    def repetition(self, item: Node, low: int, high: Bound, start: int) -> int:
        if high is not None and self.high is not None:
            shortest = item.lengths[0]
            useful = self.high // shortest if shortest else self.high
            high = min(high, max(low, useful))
        for _ in range(low):
            start = self.build(item, start)
        if high is None:
            loop = self.new()
            self.empty[start].append(loop)
            self.empty[self.build(item, loop)].append(loop)
            return loop
        end = self.new()
        for _ in range(high - low):
            self.empty[start].append(end)
            entry = self.new()
            self.empty[start].append(entry)
            start = self.build(item, entry)
        self.empty[start].append(end)
        return end


@dataclass
class Dfa:
    start: int
    accepting: list[bool]
    moves: list[dict[int, int]]  # atom -> state; a missing atom: no way to accept


def minimal_dfa(node: Node, alphabet: Alphabet, high: Bound) -> Dfa | None:
    """The minimal DFA of the node without dead states; None when nothing fits.

    With an upper bound, states first reached after `high` characters are not expanded: a
    state first reached after d characters is only used with at most high - d characters left,
    and on those strings the truncated automaton agrees with the full one (so do merged states,
    which agree on the truncated language)."""
    nfa = _Nfa(alphabet, high)
    first = nfa.new()
    final = nfa.build(node, first)

    closures: dict[frozenset[int], frozenset[int]] = {}

    def closure(states: frozenset[int]) -> frozenset[int]:
        done = closures.get(states)
        if done is None:
            seen, stack = set(states), list(states)
            while stack:
                for target in nfa.empty[stack.pop()]:
                    if target not in seen:
                        seen.add(target)
                        stack.append(target)
            done = closures[states] = frozenset(seen)
        return done

    # subsets holding a state that accepts every string (such as the padding after an
    # unanchored pattern) all behave alike: one state stands for them, or the subsets would
    # go on telling apart the partial matches that no longer matter
    universal = _universal_states(nfa, final, closure, len(alphabet.ranges))
    everything = frozenset((-1,))

    def state_of(states: frozenset[int]) -> frozenset[int]:
        subset = closure(states)
        return everything if subset & universal else subset

    start = state_of(frozenset((first,)))
    numbers = {start: 0}
    sets = [start]
    depths = [0]  # breadth first: the fewest characters that reach each state
    moves: list[dict[int, int]] = []
    work = 0  # NFA edges followed: bounds the time a hostile pattern takes to refuse
    while len(moves) < len(sets):
        if high is not None and depths[len(moves)] >= high:
            moves.append({})  # only ever reached with no characters left
            continue
        if sets[len(moves)] is everything:
            moves.append(dict.fromkeys(range(len(alphabet.ranges)), len(moves)))
            continue
        targets: dict[int, set[int]] = {}
        for state in sets[len(moves)]:
            for atoms, target in nfa.edges[state]:
                work += len(atoms)
                for atom in atoms:
                    targets.setdefault(atom, set()).add(target)
        if work > _MAX_WORK:
            raise too_complex(f"the pattern needs more than {_MAX_WORK} steps to turn into an automaton")
        row: dict[int, int] = {}
        for atom in sorted(targets):
            subset = state_of(frozenset(targets[atom]))
            number = numbers.get(subset)
            if number is None:
                if len(sets) >= _MAX_DFA_STATES:
                    raise too_complex(f"the pattern needs more than {_MAX_DFA_STATES} automaton states")
                number = numbers[subset] = len(sets)
                sets.append(subset)
                depths.append(depths[len(moves)] + 1)
            row[atom] = number
        moves.append(row)
    accepting = [final in subset or subset is everything for subset in sets]
    return _minimize(Dfa(0, accepting, moves))


def _universal_states(nfa: _Nfa, final: int, closure, atoms: int) -> frozenset[int]:
    """NFA states that surely accept every string: the greatest set of states that reach the
    final state without reading and, for every atom, can read it into the set again."""
    back: dict[int, list[int]] = {}
    for source, targets in enumerate(nfa.empty):
        for target in targets:
            back.setdefault(target, []).append(source)
    candidates, stack = {final}, [final]
    while stack:
        for source in back.get(stack.pop(), ()):
            if source not in candidates:
                candidates.add(source)
                stack.append(source)
    while True:
        failing = set()
        for state in candidates:
            covered: set[int] = set()
            for member in closure(frozenset((state,))):
                for labels, target in nfa.edges[member]:
                    if closure(frozenset((target,))) & candidates:
                        covered.update(labels)
            if len(covered) < atoms:
                failing.add(state)
        if not failing:
            return frozenset(candidates)
        candidates -= failing


def _minimize(dfa: Dfa) -> Dfa | None:
    """Drop the states that cannot reach an accepting one, then merge the states that behave
    identically (Moore's partition refinement)."""
    count = len(dfa.moves)
    back: list[list[int]] = [[] for _ in range(count)]
    for state, row in enumerate(dfa.moves):
        for target in row.values():
            back[target].append(state)
    live = {state for state in range(count) if dfa.accepting[state]}
    stack = list(live)
    while stack:
        for source in back[stack.pop()]:
            if source not in live:
                live.add(source)
                stack.append(source)
    if dfa.start not in live:
        return None
    states = sorted(live)
    block = {state: int(dfa.accepting[state]) for state in states}
    blocks = len(set(block.values()))
    while True:
        signatures = {
            state: (block[state], tuple((atom, block[t]) for atom, t in dfa.moves[state].items() if t in live))
            for state in states
        }
        numbering: dict[tuple, int] = {}
        for state in states:
            numbering.setdefault(signatures[state], len(numbering))
        block = {state: numbering[signatures[state]] for state in states}
        if len(numbering) == blocks:
            break
        blocks = len(numbering)
    # renumber by first appearance from the start, so output is stable
    order = {block[dfa.start]: 0}
    queue = [dfa.start]
    representative = {0: dfa.start}
    for state in queue:
        for target in dfa.moves[state].values():
            if target in live and block[target] not in order:
                order[block[target]] = len(order)
                representative[order[block[target]]] = target
                queue.append(target)
    moves = [
        {atom: order[block[t]] for atom, t in dfa.moves[representative[i]].items() if t in live}
        for i in range(len(order))
    ]
    accepting = [dfa.accepting[representative[i]] for i in range(len(order))]
    return Dfa(0, accepting, moves)


def distance_to_accept(dfa: Dfa) -> list[int]:
    """The fewest characters from each state to an accepting one (every state has a way)."""
    back: list[list[int]] = [[] for _ in dfa.moves]
    for state, row in enumerate(dfa.moves):
        for target in set(row.values()):
            back[target].append(state)
    distance = [0 if accepting else -1 for accepting in dfa.accepting]
    queue = [state for state, accepting in enumerate(dfa.accepting) if accepting]
    for state in queue:
        for source in back[state]:
            if distance[source] < 0:
                distance[source] = distance[state] + 1
                queue.append(source)
    return distance
