"""An agent's loop replayed against Fireside and llama-server on the same model, in one run.

    .venv/bin/python tests/bench/bench_agent_loop.py --model M.gguf [--chat-template FILE] [--no-system]
        [--turns 20] [--conversations 2] [--ctx-size 32768] [--threads N] [--llama-server PATH]

Each conversation opens with a system prompt of about 1,000 tokens; each turn adds a tool result
of 500 to 2,000 tokens (seeded, the same for both servers) and asks for a short answer (16
tokens, greedy, streamed); the answer goes back into the history as its content alone (a
reasoning model's reasoning is dropped there, as Qwen's and gpt-oss's templates do). The
conversations take turns on two slots (`--parallel 2`, llama-server `-np 2`), so each turn finds
its slot's cache after the other conversation's turn. Both servers run with their defaults
otherwise (llama-server: a 8 GiB RAM prompt cache, 32 checkpoints per slot; Fireside: its
window-sized caches, checkpoints and RAM cache).

Reported per turn: time to first token (the client's, from the request to the first streamed
content), the tokens each server prefilled (llama.cpp's `timings.prompt_n`, which both send on the
last chunk) and the minimum: what is new in that turn (the prompt less the previous prompt and
answer of that conversation). Totals and the ratios at the end: the goals are Fireside's total
time to first token at most llama-server's and its prefilled tokens within 1.1x of the minimum.

The models: Gemma 3 270M (`tests.conftest.gemma_model_path()`; its template refuses a system
role: `--no-system` puts the opening in a first user turn) and the tiny hybrid
(`tests/fixtures/make_tiny_hybrid.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.bench.bench_engine import Server, llama_server_binary  # noqa: E402
from tests.servers import free_port  # noqa: E402

WORDS = ("file", "line", "error", "import", "function", "returns", "value", "test", "passed", "failed", "module",
         "path", "config", "build", "warning", "index", "token", "cache", "request", "status")
ANSWER_TOKENS = 16


@dataclass
class Turn:
    ttft: float
    prompt: int
    prefilled: int
    minimum: int


@dataclass
class Conversation:
    messages: list[dict]
    last_prompt: int = 0
    last_answer: int = 0
    turns: list[Turn] = field(default_factory=list)


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) + (f" {rng.randrange(1000)}" if rng.random() < 0.2 else "") for _ in range(words))


def transcript(seed: int, turns: int, conversations: int) -> list[list[str]]:
    """Each conversation's opening and its tool results, the same for every server."""
    rng = random.Random(seed)
    return [[f"You are coding agent {c}. Follow the project's rules. " + _text(rng, 550)]
            + [f"Tool result {t}:\n" + _text(rng, rng.randrange(280, 1100)) for t in range(turns)]
            for c in range(conversations)]


def ask(server: Server, conversation: Conversation) -> None:
    started = time.perf_counter()
    first = None
    answer, timings, usage = [], {}, {}
    body = {"model": server.model, "messages": conversation.messages, "max_tokens": ANSWER_TOKENS, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "timings_per_token": True}
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body, timeout=600) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{server.name}: {response.status_code} {response.read().decode()[:500]}")
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    first = first or time.perf_counter()
                    answer.append(text)
            timings = chunk.get("timings") or timings
            usage = chunk.get("usage") or usage
    prompt = usage.get("prompt_tokens", timings.get("prompt_n", 0) + timings.get("cache_n", 0))
    minimum = prompt - conversation.last_prompt - conversation.last_answer if conversation.last_prompt else prompt
    conversation.turns.append(Turn((first or time.perf_counter()) - started, prompt, timings.get("prompt_n", prompt),
                                   max(minimum, 1)))
    conversation.last_prompt, conversation.last_answer = prompt, usage.get("completion_tokens", 0)
    conversation.messages.append({"role": "assistant", "content": "".join(answer)})


def replay(server: Server, script: list[list[str]], system: bool) -> list[Conversation]:
    chats = []
    for opening, *_ in script:
        messages = ([{"role": "system", "content": opening}] if system else
                    [{"role": "user", "content": opening}, {"role": "assistant", "content": "Ready."}])
        chats.append(Conversation(messages))
    for turn in range(len(script[0]) - 1):
        for chat, (_, *results) in zip(chats, script, strict=True):
            chat.messages.append({"role": "user", "content": results[turn] + "\nWhat next? Answer briefly."})
            ask(server, chat)
    return chats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--chat-template", type=Path, default=None)
    parser.add_argument("--no-system", action="store_true", help="the opening as a first user turn")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--ctx-size", type=int, default=32768, help="tokens per slot")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument("--llama-server", default=None)
    args = parser.parse_args(argv)
    script = transcript(args.seed, args.turns, args.conversations)
    threads = ["--threads", str(args.threads)] if args.threads else []
    port = free_port()
    ours = [sys.executable, "-m", "app.cli", "serve", "--model", str(args.model), "--port", str(port), "--ctx-size",
            str(args.ctx_size), "--parallel", "2", "--prompt-cache-disk", "0", *threads]
    if args.chat_template:
        ours += ["--chat-template", str(args.chat_template)]
    servers = {"fireside": lambda: Server("fireside", ours, port, env={"PYTHONPATH": os.pathsep.join(filter(None, (
        str(ROOT), os.environ.get("PYTHONPATH"))))})}
    binary = args.llama_server or llama_server_binary()
    if binary:
        their_port = free_port()
        theirs = [binary, "-m", str(args.model), "--port", str(their_port), "-c", str(args.ctx_size * 2), "-np", "2",
                  "--no-webui", "--jinja", *(["-t", str(args.threads), "-tb", str(args.threads)] if args.threads else [])]
        if args.chat_template:
            theirs += ["--chat-template-file", str(args.chat_template)]
        servers["llama-server"] = lambda: Server("llama-server", theirs, their_port)
    else:
        print("llama-server not found: Fireside alone")
    results = {}
    for name, start in servers.items():
        server = start()
        try:
            results[name] = replay(server, script, not args.no_system)
        finally:
            server.stop()
    print(f"{args.model.name}: {args.turns} turns x {args.conversations} conversations on 2 slots")
    names = list(results)
    print("turn conv " + " ".join(f"{n + ' ttft':>19} {n + ' prefill':>20}" for n in names) + "  minimum")
    for turn in range(args.turns):
        for c in range(args.conversations):
            row = [results[n][c].turns[turn] for n in names]
            print(f"{turn:4} {c:4} " + " ".join(f"{r.ttft * 1000:17.0f}ms {r.prefilled:20}" for r in row)
                  + f"  {row[0].minimum:7}")
    totals = {n: (sum(t.ttft for chat in results[n] for t in chat.turns),
                  sum(t.prefilled for chat in results[n] for t in chat.turns)) for n in names}
    minimum = sum(t.minimum for chat in results[names[0]] for t in chat.turns)
    for name, (ttft, prefilled) in totals.items():
        print(f"{name}: time to first token {ttft:.2f} s in all, {prefilled} tokens prefilled "
              f"({prefilled / minimum:.2f}x the {minimum} new)")
    if len(totals) == 2:
        print(f"Fireside / llama-server: time to first token {totals['fireside'][0] / totals['llama-server'][0]:.2f}x, "
              f"prefilled {totals['fireside'][1] / max(totals['llama-server'][1], 1):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
