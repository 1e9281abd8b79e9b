"""Report how `schema_to_gbnf` fares on the real-world corpus: the share of schemas converted,
valid instances accepted, invalid ones rejected, and the refusals by keyword.

    .venv/bin/python tests/schema_corpus/real_world/report.py [--failures] [--only NAME-SUBSTRING]

The converter comes from wherever `grammars` imports first, so another tree's converter can be
measured with this tree's corpus and harness:

    PYTHONPATH=/path/to/other/checkout .venv/bin/python tests/schema_corpus/real_world/report.py
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

try:  # the converter under test: PYTHONPATH first, else this tree
    import grammars.json_schema as converter
except ImportError:
    sys.path.insert(0, str(ROOT))
    import grammars.json_schema as converter
sys.path.insert(0, str(ROOT))  # the harness, corpus and grammar_support of this tree
for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
    del sys.modules[name]

from tests.grammar_support import accepts, compiles
from tests.schema_corpus.real_world.harness import check_schema, load_corpus


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--failures", action="store_true", help="print every failure")
    parser.add_argument("--only", default="", help="only schemas whose name contains this")
    args = parser.parse_args()
    started = time.monotonic()
    entries = [e for e in load_corpus() if args.only in e["name"]]
    results = [check_schema(e, converter.schema_to_gbnf, converter.SchemaError, accepts, compiles) for e in entries]
    by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for entry, result in zip(entries, results):
        by_file[entry["file"]][result.outcome] += 1
    converted = [r for r in results if r.outcome == "converted"]
    total = collections.Counter()
    for r in converted:
        for key in ("valid", "valid_accepted", "invalid", "invalid_rejected", "narrowed", "narrowed_rejected",
                    "narrowed_skipped", "generated_invalid", "unspellable"):
            total[key] += getattr(r, key)
    print(f"converter: {converter.__file__}")
    print(f"schemas: {len(results)}; converted {len(converted)} ({pct(len(converted), len(results))}), "
          f"refused {sum(r.outcome == 'refused' for r in results)}, crashed {sum(r.outcome == 'crashed' for r in results)}")
    for file, counts in sorted(by_file.items()):
        n = sum(counts.values())
        print(f"  {file:18} {n:4} schemas, converted {counts['converted']:4} ({pct(counts['converted'], n)})")
    with_instances = sum(1 for r in converted if r.valid)
    print(f"converted schemas with checked instances: {with_instances}; no instances: "
          f"{sum(1 for r in converted if not r.valid)} "
          f"(generation skipped for {sum(1 for r in converted if r.generation_skipped)})")
    print(f"valid instances accepted: {total['valid_accepted']}/{total['valid']} ({pct(total['valid_accepted'], total['valid'])})"
          f"  [skipped: narrowed {total['narrowed_skipped']}, generated but invalid {total['generated_invalid']}, "
          f"not spellable by the test tokenizer {total['unspellable']}]")
    print(f"invalid instances rejected: {total['invalid_rejected']}/{total['invalid']} "
          f"({pct(total['invalid_rejected'], total['invalid'])})")
    print(f"narrowed-away instances rejected: {total['narrowed_rejected']}/{total['narrowed']} "
          f"({pct(total['narrowed_rejected'], total['narrowed'])})")
    reasons = collections.Counter(reason for r in converted for reason in r.narrowed_reasons)
    if reasons:
        print("skipped as narrowed:", "; ".join(f"{reason}: {n}" for reason, n in reasons.most_common()))
    if args.failures:
        for r in converted:
            for text in r.unspellable_texts[:1]:
                print(f"UNSPELLABLE {r.name}: {text[:200]!r}")
    failing = [r for r in results if r.failures]
    print(f"schemas with failures: {len(failing)}")
    refusals: dict[str, list[str]] = collections.defaultdict(list)
    for r in results:
        if r.outcome != "converted":
            refusals[r.keyword if r.outcome == "refused" else "CRASH"].append(r.name)
    print("refusals by keyword:")
    for keyword, names in sorted(refusals.items(), key=lambda kv: -len(kv[1])):
        print(f"  {keyword:20} {len(names):4}  e.g. {names[0]}")
    skipped = collections.Counter(r.generation_skipped.split(":")[0] for r in converted if r.generation_skipped)
    if skipped:
        print("generation skipped:", dict(skipped))
    if args.failures:
        for r in failing:
            for failure in r.failures:
                print(f"FAIL {r.name}: {failure}")
        for r in results:
            if r.outcome == "crashed":
                print(f"CRASH {r.name}: {r.reason}")
    slowest = sorted(results, key=lambda r: -r.seconds)[:5]
    print("slowest:", ", ".join(f"{r.name} {r.seconds:.2f}s (generation {r.generation_seconds:.2f}s)" for r in slowest))
    print(f"time: {time.monotonic() - started:.1f}s, generating instances {sum(r.generation_seconds for r in results):.1f}s")
    return 0


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


if __name__ == "__main__":
    sys.exit(main())
