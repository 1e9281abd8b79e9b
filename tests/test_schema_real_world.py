"""`schema_to_gbnf` on several hundred schemas as users send them (tests/schema_corpus/real_world/:
pydantic models, OpenAI strict-mode schemas, OpenAPI components, MCP and function-calling tools,
SchemaStore schemas). Each schema either converts, and then the grammar accepts instances
generated from it (hypothesis-jsonschema, validated by jsonschema) and rejects mutated invalid
ones, or is refused for one of the reviewed reasons below: a new kind of refusal fails here.

How instances are generated, rendered and mutated: tests/schema_corpus/real_world/harness.py.
The numbers (share converted, instances accepted and rejected): report.py there.
"""

from __future__ import annotations

import functools
import re

import pytest

from grammars.json_schema import SchemaError, schema_to_gbnf
from tests.grammar_support import accepts, compiles
from tests.schema_corpus.real_world.harness import Result, check_schema, load_corpus

# The refusals reviewed as right (a grammar cannot enforce these exactly), by keyword, with the
# reason the SchemaError must give. Add to this only after deciding the refusal is right.
ALLOWED_REFUSALS = {
    # pydantic's set[...] / frozenset[...]: "no two items equal" is not context-free in general
    "uniqueItems": r"^`uniqueItems` cannot be expressed as a grammar",
    # oneOf whose branches may both match (e.g. a pydantic discriminator with a default, so not
    # required): a grammar cannot forbid matching two branches
    "oneOf": r"^oneOf branches \d+ and \d+ may both match a value",
    # SchemaStore: conditionals, constraints on key names, and keys matching a pattern beside
    # other keys that are allowed (a grammar for "any key but those matching the pattern")
    "if": r"^`if`/`then`/`else` is supported for objects whose `if` tests one property",
    "propertyNames": r"^`propertyNames` is supported for objects that allow only the properties they name",
    "patternProperties": r"^patternProperties is supported only with `additionalProperties: false`",
    # a decimal multipleOf (OpenAPI money: exclusiveMinimum 0, multipleOf 0.01)
    "multipleOf": r"^`multipleOf` is supported for integers with a whole divisor",
}
MIN_CONVERTED_SHARE = 0.85  # 398 of 452 (88%) when the corpus was built

CORPUS = load_corpus()
BY_NAME = {entry["name"]: entry for entry in CORPUS}


@functools.cache
def result_of(name: str) -> Result:
    """The check of one corpus schema: the same in any process and order (a fixed number of
    derandomized instances), so a result already computed in this process is reused as it is."""
    return check_schema(BY_NAME[name], schema_to_gbnf, SchemaError, accepts, compiles)


@pytest.mark.parametrize("entry", [pytest.param(e, id=e["name"]) for e in CORPUS])
def test_real_world_schema(entry: dict) -> None:
    result = result_of(entry["name"])
    if result.outcome == "crashed":
        pytest.fail(f"the converter crashed: {result.reason}")
    if result.outcome == "refused":
        assert result.keyword in ALLOWED_REFUSALS, f"a refusal not reviewed yet: {result.reason}"
        assert re.search(ALLOWED_REFUSALS[result.keyword], result.reason), f"a new reason: {result.reason}"
        return
    assert not result.failures, "\n".join(result.failures[:10])


def test_real_world_summary(capsys) -> None:
    """The numbers over the whole corpus, printed: each schema checked here unless this process
    checked it already (no other test needs to have run first)."""
    results = [result_of(entry["name"]) for entry in CORPUS]
    converted = [r for r in results if r.outcome == "converted"]
    valid = sum(r.valid for r in converted)
    accepted = sum(r.valid_accepted for r in converted)
    invalid = sum(r.invalid for r in converted)
    rejected = sum(r.invalid_rejected for r in converted)
    with capsys.disabled():
        print(f"\nreal-world schemas: {len(converted)}/{len(results)} converted; valid instances accepted "
              f"{accepted}/{valid}; invalid instances rejected {rejected}/{invalid}; schemas without instances "
              f"{sum(1 for r in converted if not r.valid)}")
    assert len(converted) >= MIN_CONVERTED_SHARE * len(results)
    assert valid >= 3 * len(converted), "too few instances were generated: is hypothesis-jsonschema working?"
