"""The syntaxes in the order they are tried, and the lookups by template and by name.

A new syntax is one module (its grammar, patterns and `ToolSyntax` entry) plus its place here.
"""

from __future__ import annotations

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
from templates.tool_calls.qwen3_coder import QWEN3_CODER, SEED_OSS
from templates.tool_calls.solar import SOLAR
from templates.tool_calls.syntax import ToolSyntax

REGISTRY: tuple[ToolSyntax, ...] = (
    GPT_OSS, MUSE, KIMI_K3, KIMI_K2, DSML, DEEPSEEK_R1, DEEPSEEK_V31, FUNCTIONARY_V32, FUNCTIONARY_V31,
    SEED_OSS, MINIMAX_M2, MINICPM5, QWEN3_CODER, HY3, GLM, SOLAR, GEMMA4, LFM2, MISTRAL, MISTRAL_JSON,
    COHERE, COMMAND_R, GRANITE, APERTUS, NEMOTRON, MINIMAX_M1, APRIEL, FIREFUNCTION, GIGACHAT, LLAMA3, HERMES,
)
"""In the order they are tried: more specific markup before markup it contains."""


def tool_syntax_for(template_source: str) -> ToolSyntax:
    """The tool-call syntax of the model whose chat template this is; `HERMES` when none is recognised."""
    syntax = next((s for s in REGISTRY if s.detect(template_source)), HERMES)
    return syntax.for_template(template_source)


def tool_syntax_named(name: str) -> ToolSyntax:
    """The registry entry called `name` (KeyError if there is none)."""
    for syntax in REGISTRY:
        if syntax.name == name:
            return syntax
    raise KeyError(name)
