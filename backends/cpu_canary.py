"""The canary: load a model as the server would and decode one batch, in a process of its own
(`python -m backends.cpu_canary MODEL [--gpu-layers N] [--threads N] [--no-repack]`).

Exit 0 after the decode, printing the extra buffer types the load used as its last line
(`extra buffers: AMX`); a native fault ends it by its signal, which is the answer
(backends/cpu_repack.py reads it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXTRA_BUFFERS = ("AMX", "CPU_REPACK", "KLEIDIAI")  # llama.cpp's extra CPU buffer types by their log names


def main(argv: list[str] | None = None) -> int:
    import llama_cpp

    from backends.llama_model import LlamaModel, ModelLoadError, ModelOptions

    parser = argparse.ArgumentParser(prog="python -m backends.cpu_canary")
    parser.add_argument("model", type=Path)
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-repack", action="store_true")
    args = parser.parse_args(argv)
    try:
        model = LlamaModel(args.model, ModelOptions(gpu_layers=args.gpu_layers, cpu_repack=not args.no_repack))
    except ModelLoadError as error:
        print(error, file=sys.stderr)
        return 2
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 64, 32, 32
    params.n_threads = params.n_threads_batch = args.threads
    ctx = llama_cpp.llama_init_from_model(model.handle, params)
    if not ctx:
        print("cannot create a context", file=sys.stderr)
        return 3
    tokens = (model.tokenize("The canary decodes one batch of a few tokens.", add_special=True,
                             parse_special=False) or [0])[:32]
    array = (llama_cpp.llama_token * len(tokens))(*tokens)
    status = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(array, len(tokens)))
    llama_cpp.llama_synchronize(ctx)
    llama_cpp.llama_free(ctx)
    if status != 0:
        print(f"llama_decode returned {status}", file=sys.stderr)
        return 4
    extra = [name for name in model.buffers if name.upper().startswith(EXTRA_BUFFERS)]
    model.close()
    print("extra buffers: " + " ".join(extra), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
