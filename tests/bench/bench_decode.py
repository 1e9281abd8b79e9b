"""Single-stream decode benchmark: Fireside over HTTP/SSE versus plain llama-cpp-python.

Run as a script (it is not a pytest test and is not collected):

    python tests/bench/bench_decode.py [--tokens 128] [--reps 3] [--json results.json]

In one run it measures, interleaved repetition by repetition so machine noise hits both sides:

* baseline: a `llama_cpp.Llama` on the same GGUF with the server's context size and thread
  counts, a greedy loop that yields exactly N tokens (end-of-generation tokens banned);
* fireside: the real `fireside serve` subprocess, one streamed `POST /v1/completions`
  (`temperature: 0`, `ignore_eos: true`, `max_tokens: N`) read with plain httpx on loopback.

For each side: time to first token (TTFT: prompt processing plus the first sample; for the
server, from sending the request to the first SSE text chunk) and decode tokens/s from the
first token to the last ((N - 1) tokens over that span). Medians and server/baseline ratios
are printed, and written as JSON with `--json PATH`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import llama_cpp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from backends.threads import physical_cores  # noqa: E402
from backends.registry import default_model_path  # noqa: E402
from tests.conftest import start_server, stop_server  # noqa: E402


# About 100 tokens of plain English for SmolLM2's tokenizer (BOS included).
DEFAULT_PROMPT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a lantern, "
    "a notebook and a flask of tea. From the gallery he could see the whole bay: the fishing "
    "boats returning to the harbour, the gulls circling above the cliffs, and the long line of "
    "the coast fading into the mist. He wrote down the wind, the weather and the ships that "
    "passed, as his father had done before him. One night, as the beam swept across the water, "
    "he noticed a small light blinking far out at sea, where no ship should have been. He"
)


@dataclass
class Run:
    side: str  # "baseline" or "fireside"
    rep: int
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    decode_s: float  # first token to last token
    decode_tps: float  # (completion_tokens - 1) / decode_s
    text: str


# ---- baseline: plain llama-cpp-python --------------------------------------------------------


class Baseline:
    def __init__(self, model_path: Path, args: argparse.Namespace):
        self.args = args
        self.llm = llama_cpp.Llama(
            model_path=str(model_path),
            n_ctx=args.ctx_size,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            flash_attn=args.baseline_flash_attn == "on",
            verbose=False,
        )
        vocab = self.llm._model.vocab
        self.eog = [t for t in range(self.llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        self.tokens = self.llm.tokenize(args.prompt.encode("utf-8"), add_bos=True, special=True)

    def close(self) -> None:
        self.llm.close()

    def run(self, rep: int) -> Run:
        if self.args.baseline_loop == "generate":
            return self._run_generate(rep)
        return self._run_eval(rep)

    def _run_eval(self, rep: int) -> Run:
        """Llama.eval plus a llama.cpp sampler chain (logit bias banning EOG, then greedy)."""
        llm, n = self.llm, self.args.tokens
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        bias = (llama_cpp.llama_logit_bias * len(self.eog))(*((t, float("-inf")) for t in self.eog))
        llama_cpp.llama_sampler_chain_add(
            chain, llama_cpp.llama_sampler_init_logit_bias(llm.n_vocab(), len(self.eog), bias)
        )
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        try:
            llm.reset()  # no prefix reuse between repetitions: the prompt is evaluated every time
            start = time.perf_counter()
            llm.eval(self.tokens)
            token = llama_cpp.llama_sampler_sample(chain, llm.ctx, -1)
            first = time.perf_counter()
            out = [token]
            while len(out) < n:
                llm.eval([token])
                token = llama_cpp.llama_sampler_sample(chain, llm.ctx, -1)
                out.append(token)
            last = time.perf_counter()
        finally:
            llama_cpp.llama_sampler_free(chain)
        return self._result(rep, out, start, first, last)

    def _run_generate(self, rep: int) -> Run:
        """Llama.generate at temperature 0 with a Python logits processor banning EOG."""
        llm, n, eog = self.llm, self.args.tokens, self.eog

        def ban_eog(_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
            logits[eog] = -np.inf
            return logits

        llm.reset()
        out: list[int] = []
        start = time.perf_counter()
        first = start
        for token in llm.generate(self.tokens, temp=0.0, top_k=1, repeat_penalty=1.0, logits_processor=[ban_eog]):
            out.append(token)
            if len(out) == 1:
                first = time.perf_counter()
            if len(out) >= n:
                break
        last = time.perf_counter()
        return self._result(rep, out, start, first, last)

    def _result(self, rep: int, out: list[int], start: float, first: float, last: float) -> Run:
        decode_s = last - first
        return Run(
            "baseline", rep, len(self.tokens), len(out), first - start, decode_s,
            (len(out) - 1) / decode_s if decode_s > 0 else float("nan"),
            self.llm.detokenize(out).decode("utf-8", errors="replace"),
        )


# ---- fireside: the real server over SSE ------------------------------------------------------


class Server:
    """The real `fireside serve`, started and stopped by the test suite's own helpers."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.running = start_server(
            "--ctx-size", str(args.ctx_size), "--threads", str(args.threads), "--parallel", str(args.parallel),
        )
        self.model = self.running.model
        self.client = httpx.Client(base_url=self.running.base_url, timeout=httpx.Timeout(300, connect=10),
                                   trust_env=False)

    def stop(self) -> None:
        self.client.close()
        stop_server(self.running)

    def run(self, rep: int) -> Run:
        body = {
            "model": self.model, "prompt": self.args.prompt, "max_tokens": self.args.tokens,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True},
        }
        parts: list[str] = []
        first = last = None
        usage = None
        start = time.perf_counter()
        with self.client.stream("POST", "/v1/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"fireside stream failed: {chunk}")
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices", []):
                    if choice.get("text"):
                        parts.append(choice["text"])
                        if first is None:
                            first = now
                        last = now
                    if choice.get("finish_reason"):
                        last = now  # arrives with the step that sampled the last token
        if first is None or last is None or usage is None:
            raise RuntimeError("the stream carried no text or no usage chunk")
        completion = int(usage["completion_tokens"])
        decode_s = last - first
        return Run(
            "fireside", rep, int(usage["prompt_tokens"]), completion, first - start, decode_s,
            (completion - 1) / decode_s if decode_s > 0 else float("nan"), "".join(parts),
        )


# ---- driver ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", "-n", type=int, default=128, help="tokens to generate per run (default 128)")
    parser.add_argument("--reps", type=int, default=3, help="measured repetitions per side (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs per side first (default 1)")
    parser.add_argument("--ctx-size", type=int, default=1024, help="context per sequence, both sides (default 1024)")
    parser.add_argument("--threads", type=int, default=physical_cores(),
                        help="threads, fixed on both sides (default: the physical cores, %(default)s here)")
    parser.add_argument("--parallel", type=int, default=4, help="server slots (default 4)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt text (default: ~100 tokens of prose)")
    parser.add_argument("--baseline-loop", choices=("eval", "generate"), default="eval",
                        help="eval: Llama.eval + a native logit-bias/greedy sampler chain, the same per-token "
                             "work as the engine (default); generate: Llama.generate with a Python logits "
                             "processor banning EOG")
    parser.add_argument("--baseline-flash-attn", choices=("on", "off"), default="on",
                        help="flash attention in the baseline Llama (default on: the server's llama.cpp "
                             "'auto' picks it on CPU; Llama() itself defaults to off)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.tokens < 2 or args.reps < 1 or args.warmup < 0 or args.threads < 1:
        parser.error("need --tokens >= 2, --reps >= 1, --warmup >= 0, --threads >= 1")
    return args


def median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(run, field) for run in runs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    model_path = default_model_path()
    print(f"model {model_path.name}; n={args.tokens} tokens, ctx {args.ctx_size}, threads {args.threads} "
          f"(batch {args.threads}), {args.parallel} slots, {args.reps} reps + {args.warmup} warmup; "
          f"baseline loop {args.baseline_loop}, flash-attn {args.baseline_flash_attn}; "
          f"load avg {os.getloadavg()[0]:.2f}", flush=True)
    load_before = os.getloadavg()
    server = Server(args)
    baseline: Baseline | None = None
    runs: list[Run] = []
    try:
        baseline = Baseline(model_path, args)
        for i in range(args.warmup):
            baseline.run(-1 - i)
            server.run(-1 - i)
        for rep in range(args.reps):
            # Alternate which side goes first, so a slow patch of the machine is shared.
            order = (baseline, server) if rep % 2 == 0 else (server, baseline)
            for side in order:
                run = side.run(rep)
                runs.append(run)
                print(f"  rep {rep} {run.side:8s} ttft {run.ttft_s * 1000:7.1f} ms  decode "
                      f"{run.decode_tps:7.1f} tok/s  ({run.completion_tokens} tokens, prompt {run.prompt_tokens})",
                      flush=True)
    finally:
        server.stop()
        if baseline is not None:
            baseline.close()
    load_after = os.getloadavg()

    base = [r for r in runs if r.side == "baseline"]
    fire = [r for r in runs if r.side == "fireside"]
    summary = {
        side: {
            "decode_tps": median(rs, "decode_tps"),
            "ttft_ms": median(rs, "ttft_s") * 1000,
            "best_decode_tps": max(r.decode_tps for r in rs),
            "best_ttft_ms": min(r.ttft_s for r in rs) * 1000,
            "decode_tps_runs": [r.decode_tps for r in rs],
            "ttft_ms_runs": [r.ttft_s * 1000 for r in rs],
        }
        for side, rs in (("baseline", base), ("fireside", fire))
    }
    ratios = {
        "decode_tps": summary["fireside"]["decode_tps"] / summary["baseline"]["decode_tps"],
        "ttft": summary["fireside"]["ttft_ms"] / summary["baseline"]["ttft_ms"],
        "best_decode_tps": summary["fireside"]["best_decode_tps"] / summary["baseline"]["best_decode_tps"],
        "best_ttft": summary["fireside"]["best_ttft_ms"] / summary["baseline"]["best_ttft_ms"],
    }
    same_text = base[-1].text == fire[-1].text
    print()
    print(f"{'':10s} {'decode tok/s':>13s} {'TTFT ms':>9s}   {'best tok/s':>11s} {'best TTFT':>10s}"
          f"   (medians / best of {args.reps})")
    for side in ("baseline", "fireside"):
        s = summary[side]
        print(f"{side:10s} {s['decode_tps']:13.1f} {s['ttft_ms']:9.1f}   {s['best_decode_tps']:11.1f} {s['best_ttft_ms']:10.1f}")
    print(f"{'ratio f/b':10s} {ratios['decode_tps']:13.3f} {ratios['ttft']:9.3f}   "
          f"{ratios['best_decode_tps']:11.3f} {ratios['best_ttft']:10.3f}")
    print(f"greedy texts identical: {same_text}; load avg before/after {load_before[0]:.2f}/{load_after[0]:.2f}")

    if args.json:
        result = {
            "model": str(model_path),
            "params": {k: v for k, v in vars(args).items() if k not in ("json",)},
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                        "llama_cpp_python": llama_cpp.__version__,
                        "loadavg_before": load_before, "loadavg_after": load_after},
            "summary": summary,
            "ratios": ratios,
            "greedy_texts_identical": same_text,
            "runs": [{k: v for k, v in asdict(r).items() if k != "text"} for r in runs],
        }
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
