"""The official JSON Schema test suite (drafts 2020-12 and 7, tests/fixtures/json-schema-test-suite/):
every schema the converter accepts rejects every instance the suite calls invalid, and the share
of schemas accepted does not fall. Valid instances the grammar leaves out are its documented
narrowings (property order, closed objects, bounded numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grammars.json_schema import SchemaError, convert_schema
from tests.grammar_support import accepts

SUITE = Path(__file__).parent / "fixtures" / "json-schema-test-suite"
DRAFTS = {"draft2020-12": None, "draft7": "http://json-schema.org/draft-07/schema#"}
MIN_CONVERTED = {"draft2020-12": 0.70, "draft7": 0.73}  # 258/368 and 187/254 when this was written


def _files() -> list[tuple[str, Path]]:
    return [(draft, path) for draft in DRAFTS for path in sorted((SUITE / draft).glob("*.json"))]


def _grammars(draft: str, path: Path) -> list[tuple[dict, str | None]]:
    """Each group of the file with its grammar (None: the converter refuses the schema)."""
    out = []
    for group in json.loads(path.read_text()):
        schema = group["schema"]
        if DRAFTS[draft] and isinstance(schema, dict) and "$schema" not in schema:
            schema = {"$schema": DRAFTS[draft], **schema}
        try:
            out.append((group, convert_schema(schema, strict=True, unique_items=False).grammar))
        except SchemaError:
            out.append((group, None))
    return out


@pytest.mark.parametrize("draft, path", _files(), ids=[f"{d}/{p.stem}" for d, p in _files()])
def test_no_invalid_instance_is_accepted(draft: str, path: Path) -> None:
    accepted_invalid = []
    for group, grammar in _grammars(draft, path):
        if grammar is None:
            continue
        for test in group["tests"]:
            text = json.dumps(test["data"], ensure_ascii=False, separators=(",", ":"))
            if not test["valid"] and accepts(grammar, text):
                accepted_invalid.append(f"{group['description']}: {test['description']}: {text}")
    assert not accepted_invalid, "\n".join(accepted_invalid)


@pytest.mark.parametrize("draft", DRAFTS)
def test_the_share_converted_does_not_fall(draft: str) -> None:
    """Every schema of the draft converted here (no other test needs to have run first)."""
    results = [grammar is not None for d, path in _files() if d == draft for _, grammar in _grammars(d, path)]
    assert results and sum(results) / len(results) >= MIN_CONVERTED[draft], f"{sum(results)}/{len(results)}"
