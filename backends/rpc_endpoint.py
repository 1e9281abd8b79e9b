"""An RPC worker's address (`--rpc`, the config's `rpc`, `fireside worker --port`), parsed and
checked without loading llama.cpp; `backends.rpc` connects to it."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PORT = 50052  # llama.cpp's rpc-server's


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """`HOST:PORT` (or `HOST`, port 50052). ggml-rpc splits at the first colon, so an IPv6
        address cannot be written; a host name that resolves to one can."""
        text = text.strip()
        host, colon, port_text = text.partition(":")
        if not host or ":" in port_text or "[" in text:
            raise ValueError(f"RPC worker {text!r}: expected HOST:PORT (an IPv6 address needs a host name)")
        port = DEFAULT_PORT
        if colon:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise ValueError(f"RPC worker {text!r}: the port must be a number from 1 to 65535")
            port = int(port_text)
        return cls(host, port)


def parse_endpoints(value: str | list[str] | tuple[str, ...]) -> tuple[Endpoint, ...]:
    """`HOST:PORT[,HOST:PORT...]`, or a list of them (the config's `rpc`), each worker once."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    endpoints = tuple(Endpoint.parse(part) for part in parts if part.strip())
    if not endpoints:
        raise ValueError("no RPC worker given: expected HOST:PORT[,HOST:PORT...]")
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"an RPC worker is listed twice in {','.join(map(str, endpoints))}")
    return endpoints
