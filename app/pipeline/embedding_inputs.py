"""An embedding request's `input`, whichever door it came through: strings, token ids, or objects
formatted by `prompt_template`.

Objects are Fireworks' structured inputs: each object becomes one string through the request's
`prompt_template`, rendered in the chat templates' sandbox with the object's fields as variables.
Both `{field}` (Fireworks' simple substitution) and Jinja2's `{{ field }}`, filters and blocks
work; `truncate_tokens(text)` cuts a string to what one input may hold in the model's tokens
(`truncate_tokens(text, n)` to n tokens), so a long field can be cut by tokens, not characters.
"""

from __future__ import annotations

import re
from typing import Any

from app.pipeline.errors import BadRequest, RequestValidationError
from backends.llama_model import LlamaModel
from templates.chat_template import TemplateRenderError, render_text

MAX_INPUTS = 2048  # per request, as Fireworks allows
Item = str | tuple[int, ...] | dict[str, Any]

# `{name}` standing alone (not part of `{{ }}` or `{% %}`): Fireworks' simple substitution
_SIMPLE_FIELD = re.compile(r"(?<!\{)\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}(?!\})")


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def parse_inputs(value: str | list[Any] | dict[str, Any], prompt_template: str | None) -> tuple[Item, ...]:
    """The request's inputs, one item each: a string, token ids or an object (only with a template)."""
    if isinstance(value, str | dict):
        items: list[Any] = [value]
    elif value and _is_token_list(value):
        items = [value]
    else:
        items = list(value)
    if not items:
        raise BadRequest("input must hold at least one text, token list or object", param="input")
    if len(items) > MAX_INPUTS:
        raise BadRequest(f"input holds {len(items)} items; one request embeds at most {MAX_INPUTS}", param="input")
    parsed: list[Item] = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            if not item:
                raise BadRequest(f"input[{i}] is an empty string: there is nothing to embed", param="input")
            parsed.append(item)
        elif _is_token_list(item):
            parsed.append(tuple(item))
        elif isinstance(item, dict):
            parsed.append(item)
        else:
            raise RequestValidationError.at(["input", i], "Expected a string, a list of token ids, an object or a "
                                            "list of any one of them", "type_error")
    objects = sum(isinstance(item, dict) for item in parsed)
    if objects and objects != len(parsed):
        raise BadRequest("input mixes objects with texts or token ids; send one kind per request", param="input")
    if objects and prompt_template is None:
        raise BadRequest("object inputs need a prompt_template that turns each object into the text to embed",
                         param="prompt_template")
    if not objects and prompt_template is not None:
        raise BadRequest("prompt_template formats object inputs; this input holds texts or token ids",
                         param="prompt_template")
    return tuple(parsed)


def format_objects(template: str, objects: list[dict[str, Any]], model: LlamaModel, input_limit: int) -> list[str]:
    """Each object's text through `template` (see the module's docstring)."""
    source = _SIMPLE_FIELD.sub(r"{{ \1 }}", template)
    named = {match.group(1) for match in _SIMPLE_FIELD.finditer(template)}
    specials = len(model.tokenize("", add_special=True, parse_special=False))

    def truncate_tokens(text: Any, max_tokens: int | None = None) -> str:
        limit = input_limit - specials if max_tokens is None else max_tokens
        if not isinstance(text, str) or not isinstance(limit, int) or limit < 0:
            raise TemplateRenderError("truncate_tokens takes a string and, optionally, a token count of 0 or more")
        tokens = model.tokenize(text, add_special=False, parse_special=False)
        return text if len(tokens) <= limit else model.detokenize(tokens[:limit], special=False)

    texts = []
    for i, fields in enumerate(objects):
        missing = sorted(named - fields.keys())
        if missing:
            raise BadRequest(f"input[{i}] has no field {missing[0]!r}, which prompt_template substitutes",
                             param="input")
        try:
            text = render_text(source, fields, {"truncate_tokens": truncate_tokens})
        except TemplateRenderError as error:
            raise BadRequest(f"prompt_template on input[{i}]: {error}", param="prompt_template") from None
        if not text:
            raise BadRequest(f"prompt_template made an empty text of input[{i}]: there is nothing to embed",
                             param="prompt_template")
        texts.append(text)
    return texts
