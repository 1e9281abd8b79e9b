"""Hermes, and every template no other syntax recognises: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""

from __future__ import annotations

from templates.tool_calls.tagged_json import tagged_json

HERMES = tagged_json("hermes", "<tool_call>", "</tool_call>", lambda src: "<tool_call>" in src,
                     padding='"\\n"?', between='"\\n"*')
