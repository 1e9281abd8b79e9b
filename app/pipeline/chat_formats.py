"""Each served model's chat format, built once: `--chat-template`, else the GGUF's own template
(ChatML when it has none), with its family and tool-call syntax recognised from the template and
the model's special tokens."""

from __future__ import annotations

from backends.registry import ServedModel
from backends.vocab import marker_texts
from templates.chat_format import ChatFormat
from templates.chat_template import CHATML_TEMPLATE

_formats: dict[str, ChatFormat] = {}


def chat_format(served: ServedModel) -> ChatFormat:
    """The model's chat format: `--chat-template`, else the GGUF's own template (ChatML when it
    has none), with its family; built once per model."""
    chat = _formats.get(served.id)
    if chat is None:
        model = served.model
        bos = model.token_text(model.bos_token_id) if model.bos_token_id >= 0 else ""
        eos = model.token_text(model.eos_token_id) if model.eos_token_id >= 0 else ""
        source = served.chat_template or model.chat_template() or CHATML_TEMPLATE
        tokens, control = marker_texts(model)
        chat = _formats[served.id] = ChatFormat(source, bos_token=bos, eos_token=eos, special_tokens=tokens,
                                                control_tokens=control)
    return chat
