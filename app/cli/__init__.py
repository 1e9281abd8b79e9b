"""The `fireside` command: one module per subcommand, each with `add_command(s)` and `run`.

A subcommand's module imports at its top only what its parser needs; what the command runs on (the
engine, llama.cpp, Litestar, httpx, huggingface_hub) is imported when it runs. So `fireside --help`,
`fireside models` and a refused `fireside serve` start at once (tests/test_cli.py checks which
modules they load)."""

from __future__ import annotations

import argparse

from app.cli import doctor, models, pull, serve, template, worker


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fireside", description="Local inference server for GGUF models")
    commands = parser.add_subparsers(dest="command", required=True)
    serve.add_command(commands)
    template.add_commands(commands)
    models.add_commands(commands)
    pull.add_command(commands)
    doctor.add_command(commands)
    worker.add_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve.run(args)
    if args.command in ("models", "rm", "config"):
        return models.run(args)
    if args.command == "pull":
        return pull.run(args)
    if args.command == "doctor":
        return doctor.run(args)
    if args.command == "worker":
        return worker.run(args)
    if args.command == "template":
        return template.run(args)
    return 2
