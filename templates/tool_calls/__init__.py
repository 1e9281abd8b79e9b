"""Tool calls in each model family's own syntax, parsed into OpenAI-shaped calls as the text streams.

A `ToolSyntax` per syntax, in `REGISTRY`: how to recognise it in the chat template, the text that
opens a call (`opener`, for lazy grammars), a GBNF grammar for well-formed calls (`call_grammar`),
and an incremental `ToolCallParser` (`parser`). `tool_syntax_for` picks the entry for a template;
where the template shows no call markup, the model's special tokens choose (`VOCABULARY_CUES`), and
`GENERIC` (every common syntax read, Hermes's `<tool_call>{json}</tool_call>` written) serves the rest.

The parser is fed the *content* text (reasoning already split off) and returns content pieces
(`str`) and `CallDelta`s, in order:
- text around calls stays content; whitespace next to a call is the model's layout and is dropped;
- call markup never reaches content: only what may still become an opener is held back;
- a call that does not parse, or names a tool not in `tool_names`, stays content, verbatim;
- JSON-in-markup syntaxes (Hermes, Mistral, Kimi, DeepSeek, GPT-OSS, ...) send a call once its JSON
  is complete: one delta with the name (and the model's id), one with all the arguments;
- XML-style syntaxes (Qwen3-Coder, GLM, MiniMax, DSML, Seed-OSS, ...) send the name as soon as the
  call's header is complete, then the arguments parameter by parameter (`{"a":1`, `,"b":"x"`, `}`);
  a parameter's value becomes its JSON type when it parses as a JSON number, boolean, null, object
  or array, else it is the text (the template writes strings unquoted);
- output that ends inside a call (`max_tokens`, a stop sequence) ends it as OpenAI's API does: the
  call stands once its name is complete, marked `cut`, with its arguments as far as they were
  written (JSON syntaxes: the text as written, which need not be a whole object; XML and other
  syntaxes: the parameters read so far, the last one as written); markup cut before the name is
  complete is dropped, unless what was written can no longer become a call (then it is content).
The argument fragments of a call concatenate to `ToolCall.arguments`, a compact JSON object (for a
call cut short in a JSON syntax, the text written). Every decision waits until the text settles
it, so a stream gives the same result however it is chunked.
The markers must reach the parser as text (special tokens rendered by the engine).

The package: the shared machinery (`patterns`: the incremental PEG; `parser`: `ToolCallParser`;
`calls`: captured text to calls; `grammar`: GBNF pieces; `syntax`: `ToolSyntax` and its two
kinds; `strict_json`), one module per syntax (or per family of close variants), and `registry`,
which lists them in the order they are tried. A new syntax is one module plus its place there.
"""

from templates.tool_calls.parser import CallDelta, ToolCall, ToolCallParser
from templates.tool_calls.registry import (
    GENERIC,
    HERMES,
    REGISTRY,
    tool_syntax_for,
    tool_syntax_named,
)
from templates.tool_calls.syntax import ToolSyntax

__all__ = [
    "GENERIC",
    "HERMES",
    "REGISTRY",
    "CallDelta",
    "ToolCall",
    "ToolCallParser",
    "ToolSyntax",
    "tool_syntax_for",
    "tool_syntax_named",
]
