"""A model's own Jinja chat template, rendered the way Hugging Face renders it, in a sandbox.

Templates come from downloaded model files (GGUF metadata) and are untrusted. They render in a
`SandboxedEnvironment` with Hugging Face's settings (`trim_blocks`, `lstrip_blocks`, the
`loopcontrols` extension, a `{% generation %}` block, HF's `tojson`, `raise_exception`,
`strftime_now`) plus the `from_json` filter that llama.cpp's templates use.

What the sandbox allows and blocks:

* Blocked: every attribute or item reached by attribute name starting with `_` (`__class__`,
  `__globals__`, `__init__`, ...), the internal attributes jinja2 knows of on functions, methods,
  frames, code, generators and coroutines (`func_globals`, `mro`, `gi_frame`, ...), callables
  marked `unsafe_callable`/`alters_data`, and unsafe `str.format` use. Such an access fails the
  render at once with `TemplateRenderError` (jinja2's own sandbox would print an empty string for
  a bare `{{ x.__class__ }}`; here it is an error). Repetition (`*`, `**`) and `+` are capped
  in size, as are widths given to str methods (`ljust`, `center`, `zfill`), and lists, dicts and
  sets stop growing at `MAX_COLLECTION_SIZE` items, so the usual one-line tricks and a loop that
  feeds its own list cannot exhaust memory. These are guards, not a resource limit: the sandbox
  protects the server's code and data, while a deliberately slow template can still be slow.
* Allowed: what real templates use - methods of str, list and dict, including the mutating ones
  (`append`, `pop`, `extend`, `update`, ...) on the lists and dicts the template builds itself
  (HF's `ImmutableSandboxedEnvironment` refuses those everywhere, yet templates written for
  llama.cpp keep queues and accumulators in them), `namespace`, `break`/`continue`, and the usual
  jinja2 filters and tests.
* The request's data is read-only: the template gets a fresh copy of the messages, tools and
  every other variable, made of list and dict subclasses whose mutating methods the sandbox
  refuses (as HF's immutable sandbox does), so `messages.append(...)` fails the render. A copy
  the template makes (`messages|list`, `messages[1:]`, `dict(message)`, `message.copy()`) is its
  own to change. Either way the caller's objects are never reached.

Tool-call arguments: OpenAI clients send `tool_calls[i].function.arguments` as a JSON string;
most templates want an object (they iterate `arguments.items()` or write `arguments|tojson`),
a few concatenate it as a string. A string holding a JSON object is handed to the template as a
`ToolArguments`: a dict (`is mapping`, `.items()`, `|tojson`, `|items`, `|dictsort` all see the
object) that reads as the client's original JSON text wherever a string is made of it (`+`,
`~`, `{{ arguments }}`, `|string`, `|trim`). When a render with these objects still fails, it is
retried once with the plain strings the client sent, and the first error is reported if that
fails too.
"""

from __future__ import annotations

import copy
import functools
import json
import operator
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, ClassVar, NoReturn

import jinja2
from jinja2 import meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment, modifies_known_mutable

# What llama.cpp falls back to when a GGUF carries no template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

MAX_STRING_SIZE = 10_000_000  # characters or items one `*` or `+` may produce; the widest str.ljust() & co.
MAX_COLLECTION_SIZE = 100_000  # items a list, dict or set may hold before a template's call grows it
MAX_EXPONENT = 1_000


class TemplateRenderError(Exception):
    """The template refused the conversation or failed; carries the template's own message.

    `raised_by_template` is true when the message is the template's own, from `raise_exception`.
    """

    def __init__(self, message: str, *, raised_by_template: bool = False):
        super().__init__(message)
        self.raised_by_template = raised_by_template


def _raise_exception(message: Any) -> NoReturn:
    raise TemplateRenderError(str(message), raised_by_template=True)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Hugging Face's tojson: the keyword arguments of json.dumps, no HTML escaping (unlike jinja2's).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys,
                      default=_json_default)


def _json_default(value: Any) -> Any:
    # `map`, `select`, ... give generators; minja (llama.cpp) and Python templates treat them as lists.
    if isinstance(value, (Iterator, set, frozenset)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _from_json(value: Any) -> Any:
    """llama.cpp's `from_json` filter: the value of a JSON string (an object or list is returned as it is)."""
    if isinstance(value, (dict, list)):  # including ToolArguments, already parsed
        return value
    return json.loads(str(value))


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _RequestDict(dict):
    """A dict of the request's data, read-only to templates."""

    __slots__ = ()


class _RequestList(list):
    """A list of the request's data, read-only to templates."""

    __slots__ = ()


class ToolArguments(_RequestDict):
    """A tool call's arguments: the parsed JSON object, which reads as the client's JSON text as a string."""

    __slots__ = ("_json_text",)

    def __init__(self, parsed: dict[str, Any], json_text: str):
        super().__init__(parsed)
        self._json_text = json_text

    def __str__(self) -> str:
        return self._json_text

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return self._json_text + other
        return NotImplemented

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other + self._json_text
        return NotImplemented


class _GenerationExtension(Extension):
    """`{% generation %}...{% endgeneration %}`: HF marks assistant text with it; here it renders its body."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation", []), [], [], body).set_lineno(lineno)

    def _generation(self, caller: Any) -> str:
        return caller()


def _sized(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _repeat(left: Any, right: Any) -> Any:
    for seq, count in ((left, right), (right, left)):
        if isinstance(count, int) and _sized(seq) * count > MAX_STRING_SIZE:
            raise SecurityError(f"repetition would make a value of {_sized(seq) * count} items")
    return operator.mul(left, right)


def _power(left: Any, right: Any) -> Any:
    if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > MAX_EXPONENT:
        raise SecurityError(f"the exponent {right} is too large")
    return operator.pow(left, right)


def _concatenate(left: Any, right: Any) -> Any:
    if _sized(left) + _sized(right) > MAX_STRING_SIZE:
        raise SecurityError(f"concatenation would make a value of {_sized(left) + _sized(right)} items")
    return operator.add(left, right)


# Error messages name these as jinja2 names the builtins ("'dict object' has no attribute 'x'"), as HF's do.
for _cls, _name in ((_RequestDict, "dict"), (_RequestList, "list"), (ToolArguments, "dict")):
    _cls.__module__, _cls.__name__, _cls.__qualname__ = "builtins", _name, _name


class _ChatSandbox(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+"})
    _checked_binops: ClassVar[dict[str, Callable[[Any, Any], Any]]] = {"*": _repeat, "**": _power, "+": _concatenate}

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        check = self._checked_binops.get(operator)
        if check is not None:
            return check(left, right)
        return super().call_binop(context, operator, left, right)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, (_RequestDict, _RequestList)) and modifies_known_mutable(obj, attr):
            kind = "dict" if isinstance(obj, dict) else "list"
            raise SecurityError(f"the request's data is read-only: {kind}.{attr}() is refused (change a copy instead)")
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        # jinja2 returns an undefined that prints as ''; an escape attempt should fail the render instead.
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        owner = getattr(obj, "__self__", None)
        if isinstance(owner, (list, dict, set)) and len(owner) >= MAX_COLLECTION_SIZE:
            raise SecurityError(f"a {type(owner).__name__} of {len(owner)} items may not be used further")
        if isinstance(owner, str) and any(isinstance(arg, int) and arg > MAX_STRING_SIZE for arg in args):
            raise SecurityError(f"{obj.__name__}() may not make a string of more than {MAX_STRING_SIZE} characters")
        return super().call(context, obj, *args, **kwargs)


def _environment() -> _ChatSandbox:
    env = _ChatSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", _GenerationExtension],
    )
    env.filters["tojson"] = _tojson
    env.filters["from_json"] = _from_json
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()  # one environment; templates compiled from it render concurrently


@functools.lru_cache(maxsize=64)
def template_variables(source: str) -> frozenset[str]:
    """The names a template reads from its context (none for a template that does not compile)."""
    try:
        return frozenset(meta.find_undeclared_variables(_ENV.parse(source)))
    except jinja2.TemplateError:
        return frozenset()


def _copy(value: Any) -> Any:
    """A deep copy of the request's data, in read-only dicts and lists."""
    if isinstance(value, ToolArguments):
        return ToolArguments(_copy(dict(value)), value._json_text)
    if isinstance(value, dict):
        return _RequestDict({key: _copy(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return _RequestList([_copy(item) for item in value])
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return copy.deepcopy(value)


def _tool_arguments(text: str) -> Any:
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return ToolArguments(parsed, text) if isinstance(parsed, dict) else text


def _with_argument_objects(messages: list[dict[str, Any]]) -> bool:
    """Turns the JSON-string arguments of tool calls in (copied) messages into `ToolArguments`."""
    changed = False
    for message in messages:
        tool_calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(tool_calls, list):
            continue
        for call in tool_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                arguments = _tool_arguments(function["arguments"])
                if arguments is not function["arguments"]:
                    dict.__setitem__(function, "arguments", arguments)
                    changed = True
    return changed


@functools.lru_cache(maxsize=64)
def _compiled(source: str) -> tuple[jinja2.Template | None, str | None]:
    """A template's compiled form, or why it does not compile. Compiling takes milliseconds to tens
    of them; a model loaded again, or one template served under several names, reuses it (a compiled
    template renders from many threads at once)."""
    try:
        return _ENV.from_string(source), None
    except jinja2.TemplateError as error:
        return None, f"the model's chat template does not compile: {error}"


class ChatTemplate:
    """A chat template compiled once; `render` may be called from many threads."""

    def __init__(self, source: str, *, bos_token: str, eos_token: str):
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._template, self.compile_error = _compiled(source)

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None, documents: list[dict[str, Any]] | None = None,
               **variables: Any) -> str:
        """The prompt for `messages`; the caller's objects are never changed by the template."""
        if self._template is None:
            raise TemplateRenderError(self.compile_error or "no chat template")
        with_objects = _copy(messages)
        if not _with_argument_objects(with_objects):
            return self._render(with_objects, add_generation_prompt, tools, documents, variables)
        try:
            return self._render(with_objects, add_generation_prompt, tools, documents, variables)
        except TemplateRenderError as error:
            first = error
        try:  # the template wants the arguments as the strings the client sent
            return self._render(_copy(messages), add_generation_prompt, tools, documents, variables)
        except TemplateRenderError:
            raise first from None

    def _render(self, messages: list[Any], add_generation_prompt: bool, tools: Any, documents: Any,
                variables: dict[str, Any]) -> str:
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **{name: _copy(value) for name, value in variables.items()},
            "messages": messages,
            "tools": _copy(tools),
            "documents": _copy(documents),
            "add_generation_prompt": add_generation_prompt,
        }
        assert self._template is not None
        try:
            return self._template.render(context)
        except TemplateRenderError:
            raise
        except SecurityError as error:
            raise TemplateRenderError(f"the chat template tried an unsafe operation: {error}") from None
        except Exception as error:  # noqa: BLE001 - whatever an untrusted template does, it fails this request alone
            raise TemplateRenderError(f"the chat template failed: {error}") from None


def render_text(source: str, variables: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> str:
    """A request's own template (an embedding request's `prompt_template`) rendered in the chat
    templates' sandbox with read-only copies of `variables` and the given `functions`."""
    try:
        template = _ENV.from_string(source)
    except jinja2.TemplateError as error:
        raise TemplateRenderError(f"the template does not compile: {error}") from None
    try:
        return template.render({**functions, **{name: _copy(value) for name, value in variables.items()}})
    except TemplateRenderError:
        raise
    except SecurityError as error:
        raise TemplateRenderError(f"the template tried an unsafe operation: {error}") from None
    except Exception as error:  # noqa: BLE001 - whatever a client's template does, it fails this request alone
        raise TemplateRenderError(f"the template failed: {error}") from None
