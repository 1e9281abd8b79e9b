"""llama.cpp's RPC backend (ggml-rpc): devices of other machines, served by `fireside worker`
(or llama.cpp's own `rpc-server`), that a model's layers can be split onto.

The backend comes from the build of llama.cpp that llama-cpp-python loaded (`-DGGML_RPC=ON`);
its functions are reached through the backend registry, as llama-server reaches them.

ggml-rpc has no error path for a worker that goes away: its connection thread calls
`ggml_abort`, which ends the process. Fireside installs ggml's abort callback while RPC is in
use; for ggml-rpc's own abort messages it notes the loss and parks that thread for good instead
of returning (returning would abort). Whatever was waiting on that connection (a decode, a load)
then waits forever, so the models using the worker are abandoned, never freed (freeing would
talk to the dead connection too), and loaded afresh when the worker is back. ggml-rpc keeps its
connections and device lists keyed by the endpoint's text for the life of the process, so a fresh
load spells the endpoint anew (`127.0.0.1:050052` is port 50052 to its parser, but a new key).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import logging
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from backends import ggml_native
from backends.ggml_native import NativeFunctionMissing, native_function
from backends.rpc_endpoint import Endpoint

log = logging.getLogger("fireside.rpc")

PROTOCOL_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of the ggml-rpc this project is tested with
_HELLO = 14  # RPC_CMD_HELLO, fixed across protocol versions
_CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE
# ggml-rpc's abort messages for a connection that failed (ggml-rpc.cpp); any other abort is a
# real assertion failure and still ends the process.
_CONNECTION_ABORTS = ("Remote RPC server crashed", "Failed to connect to", "RPC handshake failed")

_ptr = ctypes.c_void_p
T = TypeVar("T")


class RpcUnsupported(Exception):
    """This build of llama.cpp has no RPC backend."""


class WorkerUnreachable(Exception):
    """An RPC worker that cannot be used now (not listening, another protocol version)."""


class WorkerLost(Exception):
    """An RPC worker that went away while a model used it."""


# --- the backend ---------------------------------------------------------------------------

def _registry_entry() -> int | None:
    from backends.llama_model import init_backend

    init_backend()
    try:
        by_name = native_function("ggml_backend_reg_by_name", _ptr, ctypes.c_char_p)
    except NativeFunctionMissing:
        return None
    return by_name(b"RPC") or None


def supported() -> bool:
    """Whether this llama.cpp build has the RPC backend (`-DGGML_RPC=ON`)."""
    return _registry_entry() is not None


def _function(name: str, restype: Any, *argtypes: Any) -> Any:
    reg = _registry_entry()
    if reg is None:
        raise RpcUnsupported("this build of llama.cpp has no RPC backend: reinstall llama-cpp-python with "
                             "CMAKE_ARGS=\"-DGGML_RPC=ON\" (packaging/install.sh does)")
    address = native_function("ggml_backend_reg_get_proc_address", _ptr, _ptr, ctypes.c_char_p)(reg, name.encode())
    if not address:
        raise RpcUnsupported(f"this build's RPC backend has no {name}")
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def hello(endpoint: Endpoint, timeout: float = 5.0) -> tuple[int, int, int]:
    """The worker's protocol version, read with the handshake ggml-rpc opens every connection
    with; raises WorkerUnreachable when nothing answers there the way a worker does."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as sock:
            sock.sendall(bytes([_HELLO]) + struct.pack("<Q", _CAPS_SIZE) + bytes(_CAPS_SIZE))
            reply = _receive(sock, 8)
            (size,) = struct.unpack("<Q", reply)
            if size < 3 or size > 4096:
                raise WorkerUnreachable(f"RPC worker {endpoint} answered, but not as a ggml RPC server")
            major, minor, patch = _receive(sock, size)[:3]
    except TimeoutError:
        raise WorkerUnreachable(f"RPC worker {endpoint} did not answer within {timeout:g} s "
                                "(busy with another server, or a firewall)") from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise WorkerUnreachable(f"RPC worker {endpoint} is not reachable ({reason.lower()}); start it there "
                                f"with `fireside worker --host HOST --port {endpoint.port}`") from None
    if major != PROTOCOL_MAJOR:
        raise WorkerUnreachable(f"RPC worker {endpoint} speaks RPC protocol {major}.{minor}.{patch}, this server "
                                f"{PROTOCOL_MAJOR}.x: install the same llama-cpp-python on both machines")
    return major, minor, patch


def _receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError(104, "the connection closed during the handshake")
        data += chunk
    return data


# --- connections: which spelling of each endpoint is live, and losing one -------------------

@dataclass
class _Watch:
    spellings: frozenset[str]
    on_lost: Callable[[WorkerLost], None]


class Connections:
    """The endpoints' spellings in use, the models watching them, and the abort callback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation: dict[Endpoint, int] = {}
        self._users: dict[str, int] = {}  # spelling -> models loaded (or loading) on it
        self._connected: set[str] = set()  # spellings ggml-rpc holds a connection for
        self._lost: set[str] = set()  # spellings whose worker went away
        self._retired: set[str] = set()  # spellings never to be used again: the lost, and their models' others
        self._watches: list[_Watch] = []
        self._callback: Any = None  # the ctypes callback, kept alive while installed

    def spelling(self, endpoint: Endpoint) -> str:
        """The text this process gives ggml-rpc for `endpoint` now: the port with as many
        leading zeros as times a connection to it was lost."""
        zeros = "0" * self._generation.get(endpoint, 0)
        return f"{endpoint.host}:{zeros}{endpoint.port}"

    def devices(self, endpoints: tuple[Endpoint, ...]) -> list[int]:
        """The devices of each worker, in order, connecting where needed (a worker not there
        raises WorkerUnreachable before ggml-rpc would abort on it)."""
        self.install()
        add_server = _function("ggml_backend_rpc_add_server", _ptr, ctypes.c_char_p)
        count = native_function("ggml_backend_reg_dev_count", ctypes.c_size_t, _ptr)
        get = native_function("ggml_backend_reg_dev_get", _ptr, _ptr, ctypes.c_size_t)
        found: list[int] = []
        for endpoint in endpoints:
            spelled = self.spelling(endpoint)
            if spelled not in self._connected:
                hello(endpoint)  # no connection of ours holds it: check it answers, and its version
            reg = add_server(spelled.encode())
            if not reg:
                raise WorkerUnreachable(f"RPC worker {endpoint} has no devices")
            with self._lock:
                if self._users.get(spelled):  # a model holds it: its connection stays open
                    self._connected.add(spelled)
            found.extend(get(reg, i) for i in range(count(reg)))
        return found

    def hold(self, endpoints: tuple[Endpoint, ...]) -> frozenset[str]:
        with self._lock:
            spellings = frozenset(self.spelling(e) for e in endpoints)
            for spelled in spellings:
                self._users[spelled] = self._users.get(spelled, 0) + 1
            return spellings

    def release(self, spellings: frozenset[str]) -> None:
        with self._lock:
            for spelled in spellings:
                self._users[spelled] -= 1
                if not self._users[spelled]:
                    self._connected.discard(spelled)  # its model is freed next, and the connection with it

    def watch(self, spellings: frozenset[str], on_lost: Callable[[WorkerLost], None]) -> _Watch:
        watch = _Watch(spellings, on_lost)
        with self._lock:
            self._watches.append(watch)
        return watch

    def unwatch(self, watch: _Watch) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._watches.remove(watch)

    def lost(self, spellings: frozenset[str]) -> str | None:
        """Which of these spellings' workers were lost (None: none, and none retired)."""
        if not spellings & self._retired:
            return None
        gone = sorted(spellings & self._lost) or sorted(spellings & self._retired)
        return ", ".join(_plain(s) for s in gone)

    def guarded(self, spellings: frozenset[str], work: Callable[[], T], what: str) -> T:
        """`work()` on a thread of its own, given up (and left blocked for good) if a worker of
        `spellings` is lost meanwhile: a load that talks to a dead worker never returns."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = work()
            except BaseException as error:  # noqa: BLE001 - carried to the waiting thread
                box["error"] = error

        thread = threading.Thread(target=run, name=f"rpc:{what}", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
            gone = self.lost(spellings)
            if gone is not None and thread.is_alive():
                raise WorkerLost(f"RPC worker {gone} went away while {what}")
        if "error" in box:
            raise box["error"]
        return box["value"]

    # ---- ggml's abort callback -------------------------------------------------------------

    def install(self) -> None:
        with self._lock:
            if self._callback is not None:
                return
            prototype = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
            self._callback = prototype(self._on_abort)
            native_function("ggml_set_abort_callback", _ptr, prototype)(self._callback)

    def _on_abort(self, message: bytes | None) -> None:
        text = (message or b"").decode("utf-8", errors="replace").strip()
        if not any(marker in text for marker in _CONNECTION_ABORTS):
            sys.stderr.write(text + "\n")  # ggml aborts the process when this returns, as it always did
            sys.stderr.flush()
            return
        log.error("an RPC worker connection failed: %s", text)
        threading.Thread(target=self._connection_failed, name="rpc:lost", daemon=True).start()
        threading.Event().wait()  # never returns: returning from this callback aborts the process

    def _connection_failed(self) -> None:
        """Which spellings died: those whose worker does not answer a connection now (the worker
        is gone); if all answer, every one in use. The models using them are abandoned, and their
        connections to the workers still there are closed: a worker serves one connection at a
        time, and closing it frees what the abandoned model held there."""
        with self._lock:
            in_use = {s for s, n in self._users.items() if n > 0} - self._retired
        dead = {s for s in in_use if not _listening(s)} or in_use
        with self._lock:
            watches = [w for w in self._watches if w.spellings & dead]
            retired = dead.union(*(w.spellings for w in watches))
            self._lost |= dead
            self._retired |= retired
            for spelled in retired:
                endpoint = _endpoint_of(spelled)
                self._generation[endpoint] = self._generation.get(endpoint, 0) + 1
                self._connected.discard(spelled)
        for spelled in retired - dead:
            _close_connections(_endpoint_of(spelled))
        for watch in watches:
            watch.on_lost(WorkerLost(f"RPC worker {self.lost(watch.spellings)} went away; the model loads "
                                     "again when it is back"))


def _plain(spelled: str) -> str:
    host, _, port = spelled.partition(":")
    return f"{host}:{int(port)}"


def _endpoint_of(spelled: str) -> Endpoint:
    return Endpoint.parse(_plain(spelled))


def _close_connections(endpoint: Endpoint) -> None:
    """Shut down this process's TCP connections to `endpoint` (ggml-rpc's, which it has no call
    to close), found among the open file descriptors by their peer address."""
    if os.name != "posix":
        return  # Windows sockets are not file descriptors; the worker keeps the abandoned copy
    try:
        peers = {info[4][:2] for info in socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)}
        descriptors = [int(name) for name in os.listdir("/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd")]
    except OSError:
        return
    for fd in descriptors:
        try:
            copy = os.dup(fd)
        except OSError:
            continue  # closed since it was listed
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # not a socket
            os.close(copy)
            continue
        with sock, contextlib.suppress(OSError):
            if sock.type == socket.SOCK_STREAM and sock.getpeername()[:2] in peers:
                sock.shutdown(socket.SHUT_RDWR)  # acts on the connection, shared by every descriptor of it
                log.info("closed the connection to RPC worker %s of an abandoned model", endpoint)


def _listening(spelled: str) -> bool:
    endpoint = _endpoint_of(spelled)
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=2.0):
            return True
    except OSError:
        return False


CONNECTIONS = Connections()


# --- serving this machine's devices (`fireside worker`) -------------------------------------

def local_gpus() -> list[int]:
    """This machine's GPUs (integrated ones when there is no discrete GPU), as llama.cpp picks them."""
    from backends.llama_model import init_backend

    init_backend()
    return [device.handle for device in ggml_native.offload_devices(ggml_native.devices())]


def worker_devices() -> list[int]:
    """The devices a worker offers: its GPUs, else its CPU, as llama.cpp's rpc-server picks them."""
    return local_gpus() or [device.handle for device in ggml_native.devices() if device.type == "CPU"]


def serve(endpoint: Endpoint, cache_dir: str | None, threads: int, devices: list[int]) -> None:
    """ggml-rpc's server loop, on this thread, until the process ends (returns only when it
    cannot start: it printed why)."""
    start = _function("ggml_backend_rpc_start_server", None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                      ctypes.c_size_t, ctypes.POINTER(_ptr))
    array = (_ptr * len(devices))(*devices)
    start(str(endpoint).encode(), cache_dir.encode() if cache_dir else None, threads, len(devices), array)


def exposure(host: str) -> str:
    """How far a worker bound to `host` can be reached: "loopback", "private" (a LAN, a VPN
    such as Tailscale's 100.64/10, link-local) or "public". A name counts as its widest address."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError as error:
        raise ValueError(f"cannot resolve {host!r}: {error}") from None
    widest = "loopback"
    for text in addresses:
        address = ipaddress.ip_address(text.split("%")[0])
        if address.is_unspecified or address.is_global:
            return "public"
        if not address.is_loopback:
            widest = "private"
    return widest
