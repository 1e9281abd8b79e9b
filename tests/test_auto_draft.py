"""Automatic drafts (`--draft auto`, the default): where the answer repeats its prompt, tokens are
drafted by prompt lookup and checked in one batch. The answers are the ones `--draft off` gives:
greedy token for token, and sampled with a seed draw for draw (a drafted token is kept only where
the sampler drew it)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import POOL, TWO_SLOTS
from tests.fireworks_shapes import COMPLETIONS, whole

TEXT = ("def area(width, height):\n    \"\"\"The area of a rectangle.\"\"\"\n    return width * height\n\n"
        "def perimeter(width, height):\n    return 2 * (width + height)\n")
QUOTING = f"# v1\n{TEXT}# v2\n{TEXT}# v3\n"  # the model writes a third copy
LONGER = "\n".join(f"Line {i}: the river runs past the mill and the old stone bridge." for i in range(24))
LONG_QUOTING = f"{LONGER}\n\nThe same lines again:\n{LONGER[:60]}"


@pytest.fixture(scope="module")
def servers():
    auto = POOL.get(*TWO_SLOTS)
    return auto, POOL.get(*TWO_SLOTS, "--draft", "off"), auto.output


def _answer(server, prompt: str, **extra) -> dict:
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        answer = whole(http, COMPLETIONS, server.model, prompt=prompt, max_tokens=60, return_token_ids=True, **extra)
    return answer["choices"][0]


@pytest.mark.parametrize(("prompt", "extra"), [
    (QUOTING, {"temperature": 0}),
    (LONG_QUOTING, {"temperature": 0}),  # past 256 tokens of context
    (QUOTING, {"temperature": 0.8, "seed": 11}),
    ("Once upon a time, in a village by the sea,", {"temperature": 0}),  # free prose
])
def test_drafts_change_nothing_in_the_answer(servers, prompt, extra):
    auto, off, _ = servers
    drafted, plain = _answer(auto, prompt, **extra), _answer(off, prompt, **extra)
    assert drafted["token_ids"] == plain["token_ids"] and drafted["text"] == plain["text"]


def test_a_quoting_answer_is_drafted(servers):
    auto, _, log = servers
    answer = _answer(auto, QUOTING, temperature=0, user="quoting-check")
    assert TEXT.startswith(answer["text"][:40])  # it does copy the text out
    line = log.wait_for(lambda line: "user=quoting-check" in line)
    assert line is not None and "drafted_tokens=" in line
    drafted = int(line.split("drafted_tokens=")[1].split()[0])
    assert drafted >= 20
