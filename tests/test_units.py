"""Unit tests of the pure pieces: stop matching, error shapes, context fitting, template sandbox."""

from __future__ import annotations

import msgspec
import pytest

from app.api.common.decode import decode_body, from_msgspec
from app.api.fireworks.requests import ChatCompletionRequest, CompletionRequest
from app.pipeline.errors import BadRequest
from app.pipeline.prepare import fit_max_tokens
from backends.stops import StopMatcher
from templates.chat_template import ChatTemplate, TemplateRenderError


def feed_all(matcher: StopMatcher, pieces: list[str]) -> tuple[str, bool]:
    out = []
    for piece in pieces:
        text, stopped = matcher.feed(piece)
        out.append(text)
        if stopped:
            return "".join(out), True
    return "".join(out) + matcher.flush(), False


@pytest.mark.parametrize(
    ("pieces", "stops", "expected"),
    [
        (["Hello", " wor", "ld"], ("world",), ("Hello ", True)),
        (["a<", "|e", "nd|>b"], ("<|end|>",), ("a", True)),
        (["abc"], ("x",), ("abc", False)),
        (["ab", "ab", "c"], ("abc",), ("ab", True)),
        (["x", "yz"], ("yz", "xy"), ("", True)),  # the earliest match wins
        (["partial <|en"], ("<|end|>",), ("partial <|en", False)),  # held back, released at the end
        ([" STOP"], (), (" STOP", False)),
    ],
)
def test_stop_matcher(pieces, stops, expected):
    if not stops:
        pieces = [" STOP"]
    assert feed_all(StopMatcher(stops), pieces) == expected


def test_stop_matcher_holds_back_only_possible_starts():
    matcher = StopMatcher(("STOP",))
    assert matcher.feed("abcS") == ("abc", False)
    assert matcher.feed("T") == ("", False)
    assert matcher.feed("x") == ("STx", False)


def error_item(body: bytes, request_type=CompletionRequest):
    with pytest.raises(Exception) as caught:
        decode_body(body, request_type)
    return caught.value.items[0]


def test_msgspec_errors_become_422_items_with_paths():
    item = error_item(b'{"model": "m", "prompt": "x", "n": 0}')
    assert item.loc == ["body", "n"] and "1" in item.msg
    item = error_item(b'{"model": "m", "messages": [{"role": "user", "content": [{"type": 3}]}]}', ChatCompletionRequest)
    assert item.loc == ["body", "messages", 0, "content", 0, "type"]
    item = error_item(b'{"model": "m", "prompt": "x", "logit_bias": {"12": "high"}}')
    assert item.loc == ["body", "logit_bias"]  # msgspec does not name the dict key
    item = error_item(b'{"prompt": "x"}')
    assert item.loc == ["body", "model"] and item.type == "missing"
    assert error_item(b"{oops").type == "json_invalid"


def test_from_msgspec_without_a_path_is_the_body():
    error = from_msgspec(msgspec.ValidationError("Expected `object`, got `array`"))
    assert error.items[0].loc == ["body"]


def test_fit_max_tokens():
    assert fit_max_tokens(10, None, None, 100, "truncate") == 90
    assert fit_max_tokens(10, None, 16, 100, "truncate") == 16
    assert fit_max_tokens(10, 500, 16, 100, "truncate") == 90
    assert fit_max_tokens(10, 90, 16, 100, "error") == 90
    with pytest.raises(BadRequest, match="100 tokens.*510 tokens"):
        fit_max_tokens(10, 500, 16, 100, "error")
    with pytest.raises(BadRequest, match="101 tokens"):
        fit_max_tokens(101, 1, 16, 100, "truncate")


def test_fit_max_tokens_beyond_a_slots_share_of_the_pool():
    # a share of 100 tokens in a pool of 400: a prompt that fits the share stays there (a large
    # max_tokens is cut to the room left), a longer one takes the pool
    assert fit_max_tokens(10, None, None, 100, "truncate", limit=400) == 90
    assert fit_max_tokens(10, 90, None, 100, "error", limit=400) == 90
    assert fit_max_tokens(10, 500, None, 100, "truncate", limit=400) == 90
    with pytest.raises(BadRequest, match="100 tokens.*510 tokens"):
        fit_max_tokens(10, 500, None, 100, "error", limit=400)
    assert fit_max_tokens(100, None, None, 100, "truncate", limit=400) == 300
    assert fit_max_tokens(150, None, None, 100, "truncate", limit=400) == 250
    assert fit_max_tokens(150, 1000, None, 100, "truncate", limit=400) == 250
    with pytest.raises(BadRequest, match="400 tokens.*1150 tokens"):
        fit_max_tokens(150, 1000, None, 100, "error", limit=400)
    with pytest.raises(BadRequest, match="maximum context length is 400 tokens.*401 tokens"):
        fit_max_tokens(401, None, None, 100, "truncate", limit=400)


def render(source: str, **kw) -> str:
    return ChatTemplate(source, bos_token="<s>", eos_token="</s>").render(
        [{"role": "user", "content": "hi"}], **kw)


def test_template_renders_with_hf_helpers():
    source = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}:{{ m['content'] | tojson }}{% endfor %}"
              "{% if add_generation_prompt %}A:{% endif %}{{ eos_token }}")
    assert render(source) == '<s>user:"hi"A:</s>'
    assert render("{{ {'k': 'é'} | tojson }}") == '{"k": "é"}'
    assert render("{{ strftime_now('%Y') | length }}") == "4"


def test_template_errors_carry_the_templates_message():
    with pytest.raises(TemplateRenderError, match="only user and assistant"):
        render("{{ raise_exception('only user and assistant roles are supported') }}")


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.append({'role': 'x'}) }}",
        "{{ cycler.__init__.__globals__ }}",
    ],
)
def test_template_sandbox_refuses_escapes(source):
    with pytest.raises(TemplateRenderError):
        render(source)


def test_template_that_does_not_compile_fails_at_render():
    template = ChatTemplate("{% for %}", bos_token="", eos_token="")
    with pytest.raises(TemplateRenderError, match="does not compile"):
        template.render([])
