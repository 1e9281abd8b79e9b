"""Vocabulary-only GGUF files for families that no real model here belongs to.

The tests cannot download an LFM2 or a Kimi model, so they make a GGUF with the embedded
SmolLM2's metadata and tokenizer, the family's special tokens added as CONTROL tokens, and a chat
template of their choice: enough for llama.cpp to load the vocabulary (`vocab_only`), which is
what recognition reads. There are no weights: such a file cannot generate.
"""

from __future__ import annotations

from pathlib import Path

import gguf

from backends.registry import default_model_path
from tests.built import built

CONTROL = int(gguf.TokenType.CONTROL)


def vocab_gguf(name: str, special: list[str], template: str | None = None) -> Path:
    """`write_vocab_gguf`'s file as `name.gguf`, built once into the test cache (tests/built.py)."""
    return built(f"vocab-{name}", lambda folder: write_vocab_gguf(folder / f"{name}.gguf", special, template),
                 default_model_path(), tuple(special), template) / f"{name}.gguf"


def write_vocab_gguf(path: Path, special: list[str], template: str | None = None) -> Path:
    """SmolLM2's vocabulary plus `special` (CONTROL tokens), and `template` as the chat template."""
    reader = gguf.GGUFReader(default_model_path())
    writer = gguf.GGUFWriter(str(path), arch="llama")
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "tokenizer.chat_template"):
            continue
        value = field.contents()
        value_type = field.types[0]
        if name == "tokenizer.ggml.tokens":
            value = [*value, *special]
        elif name == "tokenizer.ggml.token_type":
            value = [*value, *([CONTROL] * len(special))]
        elif name == "llama.vocab_size":
            value = value + len(special)
        if value_type == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, value)
        else:
            writer.add_key_value(name, value, value_type)
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
