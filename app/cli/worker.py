"""`fireside worker`: this machine's devices (its GPUs, else its CPU) served to another machine's
`fireside serve --rpc` through llama.cpp's RPC backend, in this process.

The RPC protocol has no authentication and no encryption: whoever reaches the port can use the
devices and their memory, and read what runs on them. So the worker listens on loopback unless
told otherwise; on another address it warns, and it refuses a public one without `--insecure`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from app.cli.preflight import listen_problem
from backends.rpc_endpoint import DEFAULT_PORT, Endpoint
from backends.threads import physical_cores

_RISK = ("the RPC protocol has no authentication or encryption: anyone who can reach {where} can use this "
         "machine's devices and memory and see the model's data; keep it on a private network, or listen on "
         "127.0.0.1 and reach it through an SSH tunnel (README: 'One model across two machines')")


def add_command(commands: argparse._SubParsersAction) -> None:
    worker = commands.add_parser("worker", help="serve this machine's devices to another fireside (llama.cpp RPC)")
    worker.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: reachable only through a tunnel)")
    worker.add_argument("--port", type=int, default=DEFAULT_PORT)
    worker.add_argument("--threads", type=int, default=None, metavar="N",
                        help="CPU threads for a CPU device (default: the physical cores)")
    worker.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help="keep received weights in DIR, so that the next load of the same model sends only "
                             "their hashes")
    worker.add_argument("--insecure", action="store_true",
                        help="listen on a public address (anyone on the internet who reaches it can use it)")


def run(args: argparse.Namespace) -> int:
    from backends import rpc  # llama.cpp's RPC backend: loaded only to serve

    if not rpc.supported():
        print("fireside: this build of llama.cpp has no RPC backend; reinstall llama-cpp-python with "
              "CMAKE_ARGS=\"-DGGML_RPC=ON\" (packaging/install.sh does)", file=sys.stderr)
        return 1
    try:
        reach = rpc.exposure(args.host)
    except ValueError as error:
        print(f"fireside: {error}", file=sys.stderr)
        return 2
    if reach == "public" and not args.insecure:
        print(f"fireside: refusing to listen on {args.host}, a public (or every) address: "
              + _RISK.format(where="it") + "; --insecure does it anyway", file=sys.stderr)
        return 2
    if reach != "loopback":
        print("fireside: warning: " + _RISK.format(where=f"{args.host}:{args.port}"), file=sys.stderr, flush=True)
    if problem := listen_problem(args.host, args.port):
        print(f"fireside: {problem}", file=sys.stderr)
        return 1
    devices = rpc.worker_devices()
    if not devices:
        print("fireside: llama.cpp found no device to serve", file=sys.stderr)
        return 1
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
    threads = args.threads or physical_cores()
    endpoint = Endpoint(args.host, args.port)
    names = ", ".join(_describe(dev) for dev in devices)
    print(f"fireside worker on {endpoint}: {names}; {threads} thread{'s' if threads != 1 else ''}; serve a model on it with "
          f"`fireside serve --rpc {endpoint.host if reach != 'loopback' else '127.0.0.1'}:{endpoint.port}`", flush=True)
    server = threading.Thread(target=rpc.serve, args=(endpoint, str(args.cache) if args.cache else None, threads,
                                                      devices), name="rpc-server", daemon=True)
    stopped = threading.Event()
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: stopped.set())
    server.start()
    while not stopped.is_set() and server.is_alive():
        stopped.wait(0.5)
    sys.stdout.flush()
    # ggml-rpc's server loop has no stop: the process ends under it, without running C++ exit
    # handlers that would free the devices it is using
    os._exit(0 if stopped.is_set() else 1)


def _describe(dev: int) -> str:
    from backends.ggml_native import describe_device

    device = describe_device(dev)
    return f"{device.type} {device.description} ({device.total / (1 << 30):.1f} GiB)"
