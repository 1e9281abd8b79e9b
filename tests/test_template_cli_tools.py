"""`fireside template parse --tools` reports tool calls as the server would. A real `fireside`
process: the smoke test of the `template` command (the other template checks run in-process)."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import FIRESIDE, FIXTURES
from tests.tool_schemas import TOOLS


def test_parse_reports_tool_calls(tmp_path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS[:1]))
    completion = tmp_path / "completion.txt"
    completion.write_text('<think>\nThe user wants weather.\n</think>\n\nChecking. <tool_call>\n'
                          '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    result = subprocess.run([str(FIRESIDE), "template", "parse", "--template", str(FIXTURES / "Qwen-Qwen3-0.6B.jinja"),
                             "--completion", str(completion), "--tools", str(tools)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    message = json.loads(result.stdout)
    assert message["reasoning_content"] == "The user wants weather."
    assert message["content"] == "Checking."
    [call] = message["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert call["id"].startswith("call_") and call["type"] == "function"
