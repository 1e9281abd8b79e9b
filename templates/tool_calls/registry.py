"""The syntaxes in the order they are tried, and the lookups by template, vocabulary and name.

A syntax is recognised from the template's text first; where the template shows no call markup,
from the model's special tokens (`VOCABULARY_CUES`); failing both, `GENERIC` reads every common
syntax and writes Hermes's. A new syntax is one module (its grammar, patterns and `ToolSyntax`
entry) plus its place here.
"""

from __future__ import annotations

from collections.abc import Collection

from templates.tool_calls.any_syntax import any_syntax
from templates.tool_calls.cohere import COHERE, COMMAND_R
from templates.tool_calls.deepseek import DEEPSEEK_R1, DEEPSEEK_V31
from templates.tool_calls.dsml import DSML
from templates.tool_calls.functionary import FUNCTIONARY_V31, FUNCTIONARY_V32
from templates.tool_calls.gemma4 import GEMMA4
from templates.tool_calls.gigachat import GIGACHAT
from templates.tool_calls.glm import GLM
from templates.tool_calls.gpt_oss import GPT_OSS
from templates.tool_calls.hermes import HERMES
from templates.tool_calls.hy3 import HY3
from templates.tool_calls.json_blocks import (
    APERTUS,
    APRIEL,
    FIREFUNCTION,
    GRANITE,
    MINIMAX_M1,
    NEMOTRON,
)
from templates.tool_calls.kimi_k2 import KIMI_K2
from templates.tool_calls.kimi_k3 import KIMI_K3
from templates.tool_calls.lfm2 import LFM2
from templates.tool_calls.llama3 import LLAMA3
from templates.tool_calls.minicpm5 import MINICPM5
from templates.tool_calls.minimax_m2 import MINIMAX_M2, MUSE
from templates.tool_calls.mistral import MISTRAL, MISTRAL_JSON
from templates.tool_calls.pythonic import OLMO3
from templates.tool_calls.qwen3_coder import QWEN3_CODER, SEED_OSS
from templates.tool_calls.solar import SOLAR
from templates.tool_calls.syntax import ToolSyntax
from templates.tool_calls.tagged_json import INTERNLM, PHI4

REGISTRY: tuple[ToolSyntax, ...] = (
    GPT_OSS, MUSE, KIMI_K3, KIMI_K2, DSML, DEEPSEEK_R1, DEEPSEEK_V31, FUNCTIONARY_V32, FUNCTIONARY_V31,
    SEED_OSS, MINIMAX_M2, MINICPM5, QWEN3_CODER, HY3, GLM, SOLAR, GEMMA4, LFM2, MISTRAL, MISTRAL_JSON,
    COHERE, COMMAND_R, PHI4, INTERNLM, OLMO3, GRANITE, APERTUS, NEMOTRON, MINIMAX_M1, APRIEL, FIREFUNCTION, GIGACHAT, LLAMA3, HERMES,
)
"""In the order they are tried: more specific markup before markup it contains."""


VOCABULARY_CUES: tuple[tuple[str, ToolSyntax], ...] = (
    ("<|tool_calls_section_begin|>", KIMI_K2), ("<｜tool▁calls▁begin｜>", DEEPSEEK_V31),
    ("<|tool_call_start|>", LFM2), ("[TOOL_CALLS]", MISTRAL), ("<minimax:tool_call>", MINIMAX_M2),
    ("<seed:tool_call>", SEED_OSS), ("<tool_call:opensource>", HY3), ("<|tool_call>", GEMMA4),
    ("<|/tool_call|>", PHI4), ("<|tool_call|>", GRANITE), ("<|action_start|>", INTERNLM), ("<|tool_calls|>", SOLAR),
    ("<TOOLCALL>", NEMOTRON), ("<|tools_prefix|>", APERTUS), ("<|START_ACTION|>", COHERE),
    ("<|python_tag|>", LLAMA3), ("<tool_call>", HERMES),
)
"""A special token of the model's vocabulary that opens calls, and the syntax it opens."""

GENERIC = any_syntax("generic", HERMES, (
    HERMES, QWEN3_CODER, GLM, LFM2, MISTRAL, KIMI_K2, DEEPSEEK_R1, DEEPSEEK_V31, DSML, GEMMA4, PHI4, GRANITE,
    INTERNLM, OLMO3, SOLAR, SEED_OSS, MINIMAX_M2, MINICPM5, HY3, NEMOTRON, APERTUS, COHERE, APRIEL, MINIMAX_M1,
    LLAMA3))
"""For a model whose syntax neither its template nor its vocabulary shows: calls in any of the
common syntaxes are read (none leaks into content); a forced call is written in Hermes's."""


def tool_syntax_for(template_source: str, special_tokens: Collection[str] = ()) -> ToolSyntax:
    """The tool-call syntax of the model whose chat template this is, else the one its special
    tokens open; `GENERIC` when neither shows one."""
    syntax = next((s for s in REGISTRY if s.detect(template_source)), None)
    if syntax is None:
        syntax = next((s for token, s in VOCABULARY_CUES if token in special_tokens), GENERIC)
    return syntax.for_template(template_source)


def tool_syntax_named(name: str) -> ToolSyntax:
    """The registry entry called `name` (KeyError if there is none)."""
    for syntax in (*REGISTRY, GENERIC):
        if syntax.name == name:
            return syntax
    raise KeyError(name)
