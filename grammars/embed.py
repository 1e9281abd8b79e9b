"""Embedding one GBNF grammar inside another: every rule name of the embedded grammar gets a
prefix, so several grammars (one per tool's argument schema, say) can share one file without
their rules (`root`, `ws`, `value`, ...) colliding."""

from __future__ import annotations

import re

_RULE = re.compile(r"^([a-zA-Z0-9-]+)\s*::=", re.MULTILINE)
# What a rule body holds, token by token: literals and classes (left alone), repetition
# bounds (left alone), names (renamed), and anything else (operators, spaces).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|\{[^}]*\}|[a-zA-Z0-9-]+|.', re.DOTALL)


def embed(grammar: str, prefix: str, root: str = "root") -> tuple[str, str]:
    """The rules of `grammar` with `prefix` put before every rule name, and the new name of its root.

    Comments must already be gone (the grammars written here have none); rules may span lines.
    """
    matches = list(_RULE.finditer(grammar))
    names = {m.group(1) for m in matches}
    if root not in names:
        raise ValueError(f"the grammar has no rule {root!r}")
    lines = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(grammar)
        body = grammar[match.end():end].strip()
        renamed = "".join(prefix + token if token in names else token for token in _TOKEN.findall(body))
        lines.append(f"{prefix}{match.group(1)} ::= {renamed}")
    return "\n".join(lines), prefix + root
