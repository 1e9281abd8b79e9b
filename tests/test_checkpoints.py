"""The rules of context checkpoints (backends/checkpoints.py) and of the RAM prompt cache
(backends/prompt_cache.py), on given values; the tiny hybrid model's maker; a real partial state
taken and put back on that model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import llama_cpp

from backends.checkpoints import Checkpoint, keep, latest_within, load_partial, save_partial, targets
from backends.prompt_cache import CachedPrompt, PromptCache, RamBudget
from backends.prompt_store import SavedCheckpoint, SavedPrompt, cached_prompts
from tests.built import file_digest, tiny_hybrid

ROOT = Path(__file__).resolve().parents[1]


def test_a_prompt_is_checkpointed_at_its_hints_its_last_token_and_every_step():
    assert targets(100, 0, (97,), 8192) == [97, 99]
    assert targets(20_000, 0, (), 8192) == [8192, 16384, 19999]
    assert targets(20_000, 9000, (5000, 19990), 8192) == [16384, 19990, 19999]  # only what is still to prefill
    assert targets(10, 9, (), 8192) == []


def test_a_slot_keeps_at_most_its_limit_dropping_crowded_then_old_checkpoints():
    points: list[Checkpoint] = []
    for tokens in (100, 200, 300, 20_000, 20_050):
        points = keep(points, Checkpoint(tokens, bytes(1)), limit=4, min_step=1000)
    # 200 sat within the step of 100: it went first; the newest two (this turn's) always stay
    assert [c.tokens for c in points] == [100, 300, 20_000, 20_050]
    points = keep(points, Checkpoint(300, b"new"), limit=4, min_step=1000)
    assert [c.data for c in points if c.tokens == 300] == [b"new"]  # the same point: replaced
    assert latest_within(points, 20_049).tokens == 20_000 and latest_within(points, 99) is None


def _entry(tokens: list[int], size: int, isolation: str | None = None, unified: bool = False) -> CachedPrompt:
    return CachedPrompt(tokens, [], isolation, None, bytes(size), unified=unified)


def test_the_ram_cache_keeps_the_longest_of_a_conversation_and_evicts_the_least_recently_used():
    budget = RamBudget(10_000)
    cache = PromptCache(budget)
    turn1, turn2 = list(range(100)), list(range(150))
    assert cache.put(_entry(turn1, 1000))
    assert cache.put(_entry(turn2, 1000)) and cache.size == 1  # the later turn replaces the earlier
    assert not cache.put(_entry(turn1, 1000))  # what it extends adds nothing
    assert cache.put(_entry(turn1, 1000, isolation="other"))  # another isolation key: its own
    assert not cache.put(_entry(list(range(10)), 10))  # too short to be worth keeping
    found, shared = cache.best(tuple(range(120)) + (7,), None, 4096, unified=False)
    assert found is not None and found.tokens == turn2 and shared == 120
    assert cache.best(tuple(range(120)), "third", 4096, unified=False) == (None, 0)
    assert cache.best(tuple(range(120)), None, 100, unified=False) == (None, 0)  # larger than a slot
    assert cache.best(tuple(range(120)), None, 4096, unified=True) == (None, 0)  # saved from a split cache
    other = PromptCache(budget)  # a second model shares the budget: its entry evicts the oldest
    assert other.put(_entry(list(range(500, 700)), 6000))
    assert cache.size == 1 and cache.evictions == 1
    assert not other.put(_entry(list(range(900, 1000)), 20_000))  # larger than the whole budget


def test_checkpoints_count_against_the_ram_budget():
    held = [9000]
    cache = PromptCache(RamBudget(10_000), held_elsewhere=lambda: held[0])
    assert not cache.put(_entry(list(range(100)), 2000))  # the checkpoints hold most of the budget
    held[0] = 0
    assert cache.put(_entry(list(range(100)), 2000))


def test_saved_prompts_come_back_as_disk_entries_with_their_checkpoints():
    saved = SavedPrompt(list(range(80)), [], "key", None, b"state", [SavedCheckpoint(79, b"partial")], True)
    [entry] = cached_prompts([saved])
    assert entry.origin == "disk" and entry.unified and entry.checkpoints == [Checkpoint(79, b"partial")]


def test_the_hybrid_maker_prints_its_path_and_writes_the_same_bytes(tmp_path):
    """Run as a script, it writes the bytes the tests' in-process build wrote (a run of its own)."""
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "make_tiny_hybrid.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True, timeout=300)
    made = Path(run.stdout.strip().splitlines()[-1])
    assert made.parent == tmp_path and file_digest(made) == file_digest(tiny_hybrid())


def test_a_partial_state_put_back_continues_as_the_state_it_was():
    """On the hybrid: decode a prompt, checkpoint it, decode more, put the checkpoint back; the
    next token's logits are those of the state at the checkpoint, and the full state could not
    simply be cut there."""
    from backends.llama_model import LlamaModel, ModelOptions

    model = LlamaModel(tiny_hybrid(), ModelOptions())
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 1024, 256, 256, 1
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    memory = llama_cpp.llama_get_memory(ctx)
    tokens = model.tokenize("The quick brown fox jumps over the lazy dog. " * 8, add_special=True, parse_special=False)
    head, tail = tokens[:60], tokens[60:90]

    def decode(part: list[int], start: int) -> list[float]:
        batch = llama_cpp.llama_batch_init(len(part), 0, 1)
        for i, token in enumerate(part):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == len(part) - 1
        batch.n_tokens = len(part)
        assert llama_cpp.llama_decode(ctx, batch) == 0
        llama_cpp.llama_batch_free(batch)
        return llama_cpp.llama_get_logits_ith(ctx, -1)[:model.n_vocab]

    try:
        decode(head[:-1], 0)
        point = save_partial(ctx, 0)
        expected = decode(head[-1:], len(head) - 1)
        decode(tail, len(head))
        assert not llama_cpp.llama_memory_seq_rm(memory, 0, len(head) - 1, -1)  # a recurrent state: no cut
        assert load_partial(ctx, 0, point)
        assert llama_cpp.llama_memory_seq_rm(memory, 0, len(head) - 1, -1)  # the attention layers' tail
        assert decode(head[-1:], len(head) - 1) == expected
    finally:
        llama_cpp.llama_free(ctx)
        model.close()
