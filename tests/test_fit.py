"""The fit (`backends/fit.py`) on the tensor tables of real models for 8, 12, 16 and 24 GiB cards.

No GPU runs here: the fit is a pure function of tensor sizes and free memory, so the devices are
made up (a card's free memory taken as its size). The tensor tables are built below from the
models' published configs (Hugging Face `config.json`) in a stated quantization, and every
expected placement is worked out by hand in the comments from those numbers, not by the fit's
own code.

Quantizations (bytes per weight): Q4_K 144/256, Q6_K 210/256, Q8_0 34/32, MXFP4 17/32, F32 4.
Every card keeps a 1 GiB margin, so its budget is (size - 1) GiB. Context: 8192 tokens in all
(4 slots of 2048) unless a test says otherwise, in an f16 cache. Compute buffer (the module's
estimate): 4 * 512 * (4 * n_embd + 2 * n_ff) bytes of activations on every device with a layer,
plus 4 * 512 * n_vocab of logits where the output head is.
"""

from __future__ import annotations

import pytest

from backends.fit import GIB, HOST, FitSettings, Room, plan
from backends.model_shape import ModelShape
from backends.tensor_placement import TensorOverride, matches

Q4_K, Q6_K, Q8_0, MXFP4 = 144 / 256, 210 / 256, 34 / 32, 17 / 32
F32 = 4.0
CTX = 8192


def _bytes(weights: int, per_weight: float) -> int:
    return int(weights * per_weight)


def _shape(n_layer: int, block: dict[str, int], outside: dict[str, int], *, kv_values: int, n_embd: int,
           n_ff: int, n_vocab: int, n_expert: int = 0) -> ModelShape:
    tensors = {f"blk.{b}.{name}": size for b in range(n_layer) for name, size in block.items()}
    tensors |= outside
    return ModelShape(tensors=tensors, n_layer=n_layer, kv_values_per_token=(kv_values,) * n_layer,
                      n_embd=n_embd, n_ff=n_ff, n_vocab=n_vocab, n_ctx_train=131072, n_expert=n_expert)


def llama_8b() -> ModelShape:
    """Llama 3.1 8B: hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, FFN 14336, vocabulary
    128256, its own output head; Q4_K matrices, Q6_K head, F32 norms."""
    h, kv, ff = 4096, 1024, 14336
    block = {"attn_q.weight": _bytes(h * h, Q4_K), "attn_k.weight": _bytes(h * kv, Q4_K),
             "attn_v.weight": _bytes(h * kv, Q4_K), "attn_output.weight": _bytes(h * h, Q4_K),
             "ffn_gate.weight": _bytes(h * ff, Q4_K), "ffn_up.weight": _bytes(h * ff, Q4_K),
             "ffn_down.weight": _bytes(ff * h, Q4_K), "attn_norm.weight": h * 4, "ffn_norm.weight": h * 4}
    outside = {"token_embd.weight": _bytes(128256 * h, Q4_K), "output.weight": _bytes(128256 * h, Q6_K),
               "output_norm.weight": h * 4}
    return _shape(32, block, outside, kv_values=8 * (128 + 128), n_embd=h, n_ff=ff, n_vocab=128256)


def qwen3_30b_a3b() -> ModelShape:
    """Qwen3-30B-A3B: hidden 2048, 48 layers, 32 query heads and 4 KV heads of 128, 128 experts
    (8 used) of 768, vocabulary 151936, its own output head; Q4_K matrices, Q6_K head, F32 norms
    and router."""
    h, q, kv, e, ff = 2048, 4096, 512, 128, 768
    block = {"attn_q.weight": _bytes(h * q, Q4_K), "attn_k.weight": _bytes(h * kv, Q4_K),
             "attn_v.weight": _bytes(h * kv, Q4_K), "attn_output.weight": _bytes(q * h, Q4_K),
             "attn_norm.weight": h * 4, "ffn_norm.weight": h * 4, "attn_q_norm.weight": 128 * 4,
             "attn_k_norm.weight": 128 * 4, "ffn_gate_inp.weight": h * e * 4,
             "ffn_gate_exps.weight": _bytes(h * ff * e, Q4_K), "ffn_up_exps.weight": _bytes(h * ff * e, Q4_K),
             "ffn_down_exps.weight": _bytes(ff * h * e, Q4_K)}
    outside = {"token_embd.weight": _bytes(151936 * h, Q4_K), "output.weight": _bytes(151936 * h, Q6_K),
               "output_norm.weight": h * 4}
    return _shape(48, block, outside, kv_values=4 * (128 + 128), n_embd=h, n_ff=8 * ff, n_vocab=151936, n_expert=e)


def gpt_oss_20b() -> ModelShape:
    """gpt-oss-20b: hidden 2880, 24 layers, 64 query heads and 8 KV heads of 64 (with biases and
    sinks), 32 experts (4 used) of 2880 with biases, vocabulary 201088, its own output head;
    experts in MXFP4 as published, the other matrices Q8_0, F32 norms, biases and router."""
    h, q, kv, e, ff = 2880, 4096, 512, 32, 2880
    block = {"attn_q.weight": _bytes(h * q, Q8_0), "attn_k.weight": _bytes(h * kv, Q8_0),
             "attn_v.weight": _bytes(h * kv, Q8_0), "attn_output.weight": _bytes(q * h, Q8_0),
             "attn_q.bias": q * 4, "attn_k.bias": kv * 4, "attn_v.bias": kv * 4, "attn_output.bias": h * 4,
             "attn_sinks.weight": 64 * 4, "attn_norm.weight": h * 4, "post_attention_norm.weight": h * 4,
             "ffn_gate_inp.weight": h * e * 4, "ffn_gate_inp.bias": e * 4,
             "ffn_gate_exps.weight": _bytes(h * ff * e, MXFP4), "ffn_up_exps.weight": _bytes(h * ff * e, MXFP4),
             "ffn_down_exps.weight": _bytes(ff * h * e, MXFP4), "ffn_gate_exps.bias": ff * e * 4,
             "ffn_up_exps.bias": ff * e * 4, "ffn_down_exps.bias": h * e * 4}
    outside = {"token_embd.weight": _bytes(201088 * h, Q8_0), "output.weight": _bytes(201088 * h, Q8_0),
               "output_norm.weight": h * 4}
    return _shape(24, block, outside, kv_values=8 * (64 + 64), n_embd=h, n_ff=4 * ff, n_vocab=201088, n_expert=e)


# Per block, by hand (the tables' sums are checked in the first test):
# Llama 8B: matrices 2*4096*4096 + 2*4096*1024 + 3*4096*14336 = 218,103,808 weights * 144/256 =
#   122,683,392, norms 32,768: 122,716,160. Head 128256*4096*210/256 = 430,940,160 + norm 16,384 =
#   430,956,544. KV 8 * 256 values * 2 bytes = 4,096 per token; at 32768 tokens 134,217,728.
#   Activations 2048 * (4*4096 + 2*14336) = 92,274,688; logits 2048 * 128256 = 262,668,288.
LLAMA_BLOCK, LLAMA_HEAD, LLAMA_KV_32K = 122_716_160, 430_956_544, 134_217_728
# Qwen3-30B-A3B: shared 18,874,368 weights * 144/256 = 10,616,832 + norms 17,408 + router 1,048,576
#   = 11,682,816; experts 3 * 2048*768*128 = 603,979,776 weights * 144/256 = 339,738,624. Head
#   151936*2048*210/256 + norm = 255,260,672. KV 4 * 256 * 2 = 2,048 per token; 8192 tokens: 16,777,216.
#   Activations 2048 * (4*2048 + 2*6144) = 41,943,040; logits 2048 * 151936 = 311,164,928.
QWEN_SHARED, QWEN_EXPERTS, QWEN_HEAD, QWEN_KV = 11_682_816, 339_738_624, 255_260_672, 16_777_216
# gpt-oss-20b: shared 26,542,080 weights * 34/32 = 28,200,960 + biases, sinks, norms and router
#   424,064 = 28,625,024; experts 3 * 2880*2880*32 * 17/32 = 423,014,400 + biases 1,105,920 =
#   424,120,320. Head 201088*2880*34/32 + norm = 615,340,800. KV 8 * 128 * 2 = 2,048 per token.
#   Activations 2048 * (4*2880 + 2*11520) = 70,778,880; logits 2048 * 201088 = 411,828,224.
OSS_SHARED, OSS_EXPERTS, OSS_HEAD = 28_625_024, 424_120_320, 615_340_800


def test_the_tables_add_up_to_the_sizes_worked_out_by_hand():
    llama, qwen, oss = llama_8b(), qwen3_30b_a3b(), gpt_oss_20b()
    assert llama.layer_bytes == (LLAMA_BLOCK,) * 32 and llama.output_bytes == LLAMA_HEAD
    assert qwen.layer_bytes == (QWEN_SHARED + QWEN_EXPERTS,) * 48 and qwen.output_bytes == QWEN_HEAD
    assert oss.layer_bytes == (OSS_SHARED + OSS_EXPERTS,) * 24 and oss.output_bytes == OSS_HEAD
    experts = [n for n in qwen.tensors if matches((TensorOverride(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", "CPU"),), n)]
    assert len(experts) == 48 * 3  # the router (ffn_gate_inp) is not an expert tensor


def card(gib: float, name: str = "CUDA0") -> Room:
    return Room(name, int(gib * GIB))


# Qwen3-30B-A3B at 8192 tokens, everything on the card: 48 * (11,682,816 + 339,738,624 + 16,777,216)
# = 17,673,535,488, + head 255,260,672 + activations 41,943,040 + logits 311,164,928 = 18,281,904,128.
# Each block's experts moved to system memory free 339,738,624. Over the budget by:
#   24 GiB (23 GiB usable = 24,696,061,952): nothing, everything fits;
#   16 GiB (16,106,127,360): 2,175,776,768 over -> 2,175,776,768 / 339,738,624 = 6.4 -> 7 blocks;
#   12 GiB (11,811,160,064): 6,470,744,064 over -> 19.05 -> 20 blocks;
#    8 GiB (7,516,192,768): 10,765,711,360 over -> 31.7 -> 32 blocks.
# gpt-oss-20b at 8192 tokens: 24 * (28,625,024 + 424,120,320 + 16,777,216) = 11,268,541,440, + head
# 615,340,800 + 70,778,880 + 411,828,224 = 12,366,489,344. Moving a block's experts frees 424,120,320:
#   24 and 16 GiB: fits; 12 GiB: 555,329,280 over -> 1.3 -> 2 blocks; 8 GiB: 4,850,296,576 -> 11.4 -> 12.
@pytest.mark.parametrize(("model", "gib", "expert_blocks"), [
    (qwen3_30b_a3b, 24, 0), (qwen3_30b_a3b, 16, 7), (qwen3_30b_a3b, 12, 20), (qwen3_30b_a3b, 8, 32),
    (gpt_oss_20b, 24, 0), (gpt_oss_20b, 16, 0), (gpt_oss_20b, 12, 2), (gpt_oss_20b, 8, 12),
])
def test_a_moe_model_keeps_every_layer_on_the_card_and_moves_experts_first(model, gib, expert_blocks):
    shape = model()
    placed = plan(shape, [card(gib)], FitSettings(ctx_tokens=CTX))
    assert placed.fits
    assert placed.gpu_layers == shape.n_layer + 1  # every layer and the head stay on the card
    assert placed.cpu_expert_blocks == expert_blocks
    gpu, host = placed.devices[0], placed.host
    assert gpu.blocks == tuple(range(shape.n_layer)) and gpu.output
    assert host.expert_blocks == tuple(range(expert_blocks))
    assert gpu.expert_blocks == tuple(range(expert_blocks, shape.n_layer))
    assert gpu.total <= (gib - 1) * GIB
    # the overrides that llama.cpp gets move exactly those experts
    moved = {name for name in shape.tensors if matches(placed.overrides, name) == "CPU"}
    assert moved == {f"blk.{b}.ffn_{w}_exps.{kind}" for b in range(expert_blocks) for w in ("gate", "up", "down")
                     for kind in ("weight", "bias") if f"blk.{b}.ffn_{w}_exps.{kind}" in shape.tensors}


def test_with_every_expert_in_system_memory_whole_layers_move_next():
    # Qwen3-30B-A3B on a 2 GiB card (1 GiB usable = 1,073,741,824): with all experts in system memory
    # a block still takes 11,682,816 + 16,777,216 = 28,460,032 and the head, activations and logits
    # 608,368,640: (1,073,741,824 - 608,368,640) / 28,460,032 = 16.35 -> the last 16 blocks (32-47)
    # and the head: 17 layers.
    shape = qwen3_30b_a3b()
    placed = plan(shape, [card(2)], FitSettings(ctx_tokens=CTX))
    assert (placed.gpu_layers, placed.cpu_expert_blocks) == (17, 48)
    assert placed.devices[0].blocks == tuple(range(32, 48)) and placed.devices[0].expert_blocks == ()
    assert placed.host.blocks == tuple(range(32)) and placed.host.expert_blocks == tuple(range(48))
    assert "every block's experts in system memory" in placed.reason


def test_a_dense_model_moves_whole_layers():
    # Llama 8B with 32768 tokens of cache: a block 122,716,160 + 134,217,728 = 256,933,888; all 33
    # layers 9,007,783,936 with the head, activations and logits. 8 GiB (7,516,192,768 usable):
    # (7,516,192,768 - 430,956,544 - 92,274,688 - 262,668,288) / 256,933,888 = 26.19 -> 26 blocks
    # (6-31) and the head: 27 layers. 12 GiB and more: all 33.
    shape = llama_8b()
    small = plan(shape, [card(8)], FitSettings(ctx_tokens=32768))
    assert (small.gpu_layers, small.cpu_expert_blocks) == (27, 0)
    assert small.devices[0].blocks == tuple(range(6, 32)) and small.devices[0].output
    assert small.devices[0].kv_cache == 26 * LLAMA_KV_32K and small.host.kv_cache == 6 * LLAMA_KV_32K
    for gib in (12, 16, 24):
        assert plan(shape, [card(gib)], FitSettings(ctx_tokens=32768)).gpu_layers == 33
    # at 8192 tokens a block's cache is a quarter: 9,007,783,936 - 32 * 100,663,296 = 5,786,558,464 fits 8 GiB
    assert plan(shape, [card(8)], FitSettings(ctx_tokens=8192)).gpu_layers == 33


def test_a_smaller_cache_type_fits_more():
    # Llama 8B, 32768 tokens in q8_0 (34/32 bytes a value): 4,096 / 2 * 34 / 32 = 2,176 bytes a token,
    # 71,303,168 a block: (6,730,293,248) / (122,716,160 + 71,303,168) = 34.7 -> all 32 blocks fit.
    placed = plan(llama_8b(), [card(8)], FitSettings(ctx_tokens=32768, kv_element_bytes=34 / 32))
    assert placed.gpu_layers == 33


def test_two_cards_are_filled_in_order_and_the_split_says_so():
    # Qwen3-30B-A3B on two 12 GiB cards: the first takes blocks while they fit beside its activations:
    # (11,811,160,064 - 41,943,040) / 368,198,656 = 31.96 -> 31 blocks; the second the other 17 and the
    # head: 17 * 368,198,656 + 255,260,672 + 41,943,040 + 311,164,928 = 6,867,745,792, which fits.
    placed = plan(qwen3_30b_a3b(), [card(12, "CUDA0"), card(12, "CUDA1")], FitSettings(ctx_tokens=CTX))
    assert (placed.gpu_layers, placed.cpu_expert_blocks) == (49, 0)
    assert placed.tensor_split == (31.0, 18.0)
    first, second = placed.devices
    assert first.blocks == tuple(range(31)) and not first.output
    assert second.blocks == tuple(range(31, 48)) and second.output
    assert second.total == 6_867_745_792


def test_gpu_memory_caps_what_a_card_may_take():
    # a 24 GiB card capped at 11 GiB fits as a 12 GiB one does: the experts of 20 blocks move
    placed = plan(qwen3_30b_a3b(), [card(24)], FitSettings(ctx_tokens=CTX, gpu_memory=11 * GIB))
    assert placed.cpu_expert_blocks == 20


def test_the_users_overrides_are_kept_and_counted():
    # The experts of blocks 40-47 sent to the CPU by hand free 8 * 339,738,624 = 2,717,908,992, more
    # than the 2,175,776,768 a 16 GiB card is short of: the fit moves nothing more.
    mine = (TensorOverride(r"blk\.4[0-7]\.ffn_(up|down|gate)_exps", "CPU"),)
    placed = plan(qwen3_30b_a3b(), [card(16)], FitSettings(ctx_tokens=CTX, overrides=mine))
    assert placed.cpu_expert_blocks == 0 and placed.overrides == mine
    assert placed.host.weights >= 8 * QWEN_EXPERTS
    assert placed.devices[0].expert_blocks == tuple(range(40))


def test_a_number_of_layers_is_taken_as_given_and_refused_when_it_cannot_fit():
    # all 49 layers of Qwen3-30B-A3B (18,281,904,128) on a 16 GiB card: more than its free memory
    given = plan(qwen3_30b_a3b(), [card(16)], FitSettings(ctx_tokens=CTX, gpu_layers=-1))
    assert given.gpu_layers == 49 and given.cpu_expert_blocks == 0 and not given.fits
    assert given.problem() == ("CUDA0 would take 17.03 GiB (15.95 GiB weights, 768 MiB KV cache, 337 MiB compute) "
                               "but 16.00 GiB is available")
    # a number that fits in the free memory may use the margin the fit keeps
    assert plan(gpt_oss_20b(), [card(12)], FitSettings(ctx_tokens=CTX, gpu_layers=99)).fits


def test_system_memory_too_small_is_refused_with_the_numbers():
    placed = plan(qwen3_30b_a3b(), [card(8)], FitSettings(ctx_tokens=CTX, host_free=8 * GIB))
    assert not placed.fits
    assert placed.problem().startswith("system memory would take 10.")
    assert placed.problem().endswith("but 8.00 GiB is available")


def test_no_gpu_keeps_everything_in_system_memory():
    placed = plan(gpt_oss_20b(), [], FitSettings(ctx_tokens=CTX))
    assert placed.gpu_layers == 0 and placed.devices == () and placed.host.blocks == tuple(range(24))
    assert placed.host.output and placed.overrides == ()


def test_the_description_names_what_each_device_holds():
    lines = plan(qwen3_30b_a3b(), [card(16)], FitSettings(ctx_tokens=CTX)).describe()
    assert lines[0] == "the expert tensors of blocks 0-6 stay in system memory; everything else is on the GPU"
    assert lines[1].startswith("CUDA0: the layers of every block (0-47), the experts of blocks 7-47, the output "
                               "head; ")
    assert lines[2].startswith(f"{'system memory'}: the experts of blocks 0-6, the token embedding; ")
    assert HOST == "CPU"


def test_a_draft_model_beside_it_takes_its_room_first():
    # 6 GiB kept for a draft model on a 24 GiB card: 17 GiB usable (18,253,611,008), 28,293,120 short
    # of the 18,281,904,128 everything takes: the experts of one block move.
    placed = plan(qwen3_30b_a3b(), [card(24)], FitSettings(ctx_tokens=CTX, reserved=6 * GIB))
    assert placed.cpu_expert_blocks == 1
