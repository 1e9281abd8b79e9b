"""The schema corpus itself is right: every valid instance validates with `jsonschema`, every
invalid one fails, and each unsupported schema holds exactly the construct it names."""

from __future__ import annotations

from tests.schema_corpus.check_corpus import main as check_corpus


def test_corpus_agrees_with_jsonschema(capsys) -> None:
    assert check_corpus() == 0, capsys.readouterr().out
