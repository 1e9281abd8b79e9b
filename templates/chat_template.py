"""A model's own Jinja chat template, rendered the way Hugging Face renders it, in a sandbox.

Templates come from downloaded model files and are untrusted: they run in jinja2's immutable
sandbox, so they cannot reach Python internals or mutate the request's data.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# What llama.cpp falls back to when a GGUF carries no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class TemplateRenderError(Exception):
    """The template refused the conversation or failed; carries the template's own message."""


def _raise_exception(message: str) -> None:
    raise TemplateRenderError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Hugging Face's tojson: no HTML escaping (unlike jinja2's), keyword arguments of json.dumps.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    def __init__(self, source: str, *, bos_token: str, eos_token: str):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template: jinja2.Template | None = _environment().from_string(source)
            self.compile_error: str | None = None
        except jinja2.TemplateError as error:
            self._template = None
            self.compile_error = f"the model's chat template does not compile: {error}"

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
               **variables: Any) -> str:
        if self._template is None:
            raise TemplateRenderError(self.compile_error or "no chat template")
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **variables,
            )
        except TemplateRenderError:
            raise
        except jinja2.exceptions.SecurityError as error:
            raise TemplateRenderError(f"the chat template tried an unsafe operation: {error}") from None
        except Exception as error:  # whatever an untrusted template does, it fails this request alone
            raise TemplateRenderError(f"the chat template failed: {error}") from None
