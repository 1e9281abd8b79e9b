"""Cross-encoder ranking (bge-reranker style): a (query, document) pair read as one input by a
model that pools to class scores (llama.cpp's rank pooling), the way llama.cpp's server does it.

The pair: the GGUF's own rerank template (`tokenizer.chat_template.rerank`, `{query}` and
`{document}` replaced) where it carries one; else the tokenizer's specials around the two texts
as Hugging Face's tokenizers join a pair: `<s> q </s></s> d </s>` for XLM-RoBERTa,
`[CLS] q [SEP] d [SEP]` for BERT (llama.cpp's server leaves BERT's closing [SEP] out; Hugging
Face, whose checkpoints these are, puts it in). The score is in [0, 1]: the sigmoid of a
single-class model's logit (as sentence-transformers' CrossEncoder reports it), or the
probability of the class labelled "yes" where the model has several (a rank-pooled
Qwen3-Reranker: llama.cpp already applies the softmax for Qwen3).
"""

from __future__ import annotations

import math

import llama_cpp
import numpy as np

from backends.llama_model import LlamaModel
from backends.model_cache import per_model

SOFTMAX_INSIDE = frozenset({"qwen3", "qwen3vl"})  # architectures whose rank head llama.cpp softmaxes


class RankingError(ValueError):
    """A model whose class scores cannot be read as relevance."""


def class_labels(model: LlamaModel) -> tuple[str, ...]:
    count = llama_cpp.llama_model_n_cls_out(model.handle)
    labels = []
    for i in range(count):
        label = llama_cpp.llama_model_cls_label(model.handle, i)
        labels.append(label.decode("utf-8", "replace") if label else "")
    return tuple(labels)


rerank_template = per_model(lambda model: model.metadata("tokenizer.chat_template.rerank"))
"""The GGUF's rerank template (None for most cross-encoders), read once per model."""


def pair_tokens(model: LlamaModel, query: str, document: str) -> list[int]:
    """The tokens a cross-encoder reads for one (query, document) pair."""
    template = rerank_template(model)
    if template is not None:
        text = template.replace("{query}", query).replace("{document}", document)
        return model.tokenize(text, add_special=False, parse_special=True)
    vocab = model.vocab
    eos = llama_cpp.llama_vocab_eos(vocab)
    sep = llama_cpp.llama_vocab_sep(vocab)
    eos = eos if eos != llama_cpp.LLAMA_TOKEN_NULL else sep
    add_eos, add_sep = llama_cpp.llama_vocab_get_add_eos(vocab), llama_cpp.llama_vocab_get_add_sep(vocab)
    tokens = [model.bos_token_id] if model.add_bos else []
    tokens += model.tokenize(query, add_special=False, parse_special=False)
    tokens += [eos] if add_eos else []
    tokens += [sep] if add_sep else []
    tokens += model.tokenize(document, add_special=False, parse_special=False)
    tokens += [eos] if add_eos else [sep] if add_sep else []
    return tokens


def relevance(model: LlamaModel, scores: np.ndarray) -> float:
    """A pair's relevance in [0, 1] from the model's class scores (see the module's docstring)."""
    if len(scores) == 1:
        logit = float(scores[0])
        return 1 / (1 + math.exp(-logit)) if logit >= 0 else math.exp(logit) / (1 + math.exp(logit))
    labels = [label.lower() for label in class_labels(model)]
    if "yes" not in labels:
        raise RankingError(f"this ranking model scores {len(scores)} classes ({', '.join(labels) or 'unlabelled'}) "
                           "and none is labelled 'yes'; it cannot say which means relevant")
    arch = model.metadata("general.architecture")
    probabilities = scores.astype(np.float64)
    if arch not in SOFTMAX_INSIDE:
        probabilities = np.exp(probabilities - probabilities.max())
        probabilities /= probabilities.sum()
    return float(probabilities[labels.index("yes")])
