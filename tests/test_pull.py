"""`fireside pull` against a local stand-in for the Hugging Face Hub (no network).

The stand-in speaks what huggingface_hub 2.x calls for a pull: `GET /api/models/{repo}[/revision/{rev}]?blobs=true`
(file list with sizes and LFS sha256), `HEAD /{repo}/resolve/{rev}/{file}` (a 302 to a "CDN" on another
origin with `X-Repo-Commit`, `X-Linked-Etag`, `X-Linked-Size`, as the Hub answers for LFS files; a 200
with `ETag` for small git files), and `GET` of the file with `Range` for resumes. huggingface_hub reads
`HF_ENDPOINT`, `HF_HOME` and `HF_HUB_DISABLE_XET` into `huggingface_hub.constants` when imported, so the
fixture sets them and reloads that module (and reloads it again afterwards).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from huggingface_hub import constants as hf_constants

from app import cli
from app.hub import RemoteFile, Target, choose, parse_target
from app.settings.config import load_config

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REVISIONS = {"main", "v1", COMMIT}


def gguf_bytes(seed: str, size: int = 4096) -> bytes:
    """Fake model bytes: GGUF magic, then a pattern unique to `seed` (never a real model)."""
    pattern = hashlib.sha256(seed.encode()).digest()
    return (b"GGUF" + pattern * (size // len(pattern) + 1))[:size]


@dataclass
class HubFile:
    data: bytes
    lfs: bool = True  # every real GGUF is an LFS file; small git files are served without redirect
    listed_sha256: str | None = None  # what the Hub claims, when it should not match the data

    @property
    def sha256(self) -> str:
        return self.listed_sha256 or hashlib.sha256(self.data).hexdigest()

    @property
    def git_sha1(self) -> str:
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()


@dataclass
class FakeHub:
    repos: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # gated repo -> the token that opens it
    cut_first_get: dict[str, int] = field(default_factory=dict)  # file path -> bytes sent before the cut
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)  # header names in lower case
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, repo: str, files: dict[str, HubFile]) -> None:
        self.repos[repo] = {"README.md": HubFile(b"# a model card\n", lfs=False), **files}

    def seen(self, method: str, pattern: str) -> list[dict[str, str]]:
        return [headers for m, path, headers in self.requests if m == method and re.search(pattern, path)]


class HubHandler(BaseHTTPRequestHandler):
    hub: FakeHub

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def _route(self, method: str) -> None:
        self.hub.requests.append((method, self.path, {k.lower(): v for k, v in self.headers.items()}))
        path = unquote(urlsplit(self.path).path)
        if match := re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path):
            return self._model_info(match.group(1), match.group(2) or "main")
        if match := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            return self._resolve(method, match.group(1), match.group(2), match.group(3))
        if match := re.fullmatch(r"/cdn/([^/]+/[^/]+)/(.+)", path):
            return self._send_file(method, self.hub.repos[match.group(1)][match.group(2)], match.group(2))
        self._error(404, "NotFound", "no such route")

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _model_info(self, repo: str, revision: str) -> None:
        if repo not in self.hub.repos:
            return self._error(404, "RepoNotFound", "Repository not found")
        if revision not in REVISIONS:
            return self._error(404, "RevisionNotFound", "Invalid rev id")
        siblings = []
        for name, file in self.hub.repos[repo].items():
            sibling = {"rfilename": name, "size": len(file.data), "blobId": file.git_sha1}
            if file.lfs:
                sibling["lfs"] = {"size": len(file.data), "sha256": file.sha256, "pointerSize": 134}
            siblings.append(sibling)
        body = json.dumps({"id": repo, "sha": COMMIT, "private": False, "siblings": siblings}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _resolve(self, method: str, repo: str, revision: str, name: str) -> None:
        if repo not in self.hub.repos:
            return self._error(404, "RepoNotFound", "Repository not found")
        needed = self.hub.tokens.get(repo)
        if needed and self.headers.get("Authorization") != f"Bearer {needed}":
            return self._error(401, "GatedRepo", f"Access to model {repo} is restricted.")
        file = self.hub.repos[repo].get(name)
        if file is None or revision not in REVISIONS:
            return self._error(404, "EntryNotFound", f"{name} does not exist on {revision}")
        if not file.lfs:
            return self._send_file(method, file, name, etag=file.git_sha1)
        self.send_response(302)
        self.send_header("Location", f"http://localhost:{self.hub.port}/cdn/{repo}/{name}")  # another origin
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("X-Linked-Etag", f'"{file.sha256}"')
        self.send_header("X-Linked-Size", str(len(file.data)))
        self.send_header("ETag", f'"{file.git_sha1}"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send_file(self, method: str, file: HubFile, name: str, etag: str | None = None) -> None:
        start = 0
        if match := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", "")):
            start = int(match.group(1))
        body = file.data[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(file.data) - 1}/{len(file.data)}")
        if etag:
            self.send_header("ETag", f'"{etag}"')
            self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        if method == "HEAD":
            return
        cut = self.hub.cut_first_get.pop(name, None)
        self.wfile.write(body if cut is None else body[:cut])  # a cut: the connection closes short


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A running stand-in, huggingface_hub pointed at it, and every folder under tmp_path."""
    fake = FakeHub()
    handler = type("Handler", (HubHandler,), {"hub": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    for name, value in {
        "HF_ENDPOINT": fake.url, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0", "NO_PROXY": "127.0.0.1,localhost",
        "FIRESIDE_MODELS_DIR": str(tmp_path / "models"), "FIRESIDE_CONFIG_DIR": str(tmp_path / "config"),
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT",
                 "HF_HUB_ENABLE_HF_TRANSFER", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    importlib.reload(hf_constants)
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        monkeypatch.undo()
        importlib.reload(hf_constants)


def fireside_pull(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run `fireside pull ARGV` in this process: exit code, stdout, stderr."""
    capsys.readouterr()
    code = cli.main(["pull", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def models(tmp_path: Path) -> Path:
    return tmp_path / "models"


def registered() -> dict[str, dict[str, Path | None]]:
    return {entry.id: {"file": entry.file, "mmproj": entry.mmproj} for entry in load_config().models}


def one_line_error(code: int, err: str) -> str:
    """The error contract: exit 1, a single `fireside: ...` line, no traceback."""
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert lines and lines[-1].startswith("fireside: "), err
    return lines[-1]


def test_a_repo_with_one_model_is_downloaded_verified_and_registered(hub, tmp_path, capsys):
    data = gguf_bytes("tiny")
    hub.add("acme/Tiny-GGUF", {"Tiny-Q4_K_M.gguf": HubFile(data)})
    code, out, err = fireside_pull(capsys, "acme/Tiny-GGUF")
    assert code == 0, err
    path = models(tmp_path) / "acme" / "Tiny-GGUF" / "Tiny-Q4_K_M.gguf"
    assert path.read_bytes() == data
    assert registered() == {"tiny-q4_k_m": {"file": path, "mmproj": None}}
    config_text = (tmp_path / "config" / "config.toml").read_text()
    assert 'file = "acme/Tiny-GGUF/Tiny-Q4_K_M.gguf"' in config_text  # relative to the models folder
    assert '"model": "tiny-q4_k_m"' in out and str(path) in out
    assert not (tmp_path / "models" / "acme" / "Tiny-GGUF" / "README.md").exists()
    # The CDN is another origin: huggingface_hub must not send it the token.
    assert all("authorization" not in headers for headers in hub.seen("GET", r"^/cdn/"))
    # Pulling again finds the file in place: no second download.
    code, _, err = fireside_pull(capsys, "acme/Tiny-GGUF")
    assert code == 0, err
    assert len(hub.seen("GET", r"^/cdn/")) == 1


QUANTS = {name: HubFile(gguf_bytes(name)) for name in
          ("Model-Q4_K_M.gguf", "Model-Q4_K_S.gguf", "Model-Q8_0.gguf", "Model-IQ4_XS.gguf")}


def test_quant_picks_one_of_several_case_insensitively(hub, tmp_path, capsys):
    hub.add("acme/Model-GGUF", QUANTS)
    code, _, err = fireside_pull(capsys, "acme/Model-GGUF", "--quant", "q4_k_m")
    assert code == 0, err
    folder = models(tmp_path) / "acme" / "Model-GGUF"
    assert sorted(p.name for p in folder.glob("*.gguf")) == ["Model-Q4_K_M.gguf"]
    assert list(registered()) == ["model-q4_k_m"]


def test_several_quants_without_quant_is_an_error_listing_them(hub, tmp_path, capsys):
    hub.add("acme/Model-GGUF", QUANTS)
    line = one_line_error(*fireside_pull(capsys, "acme/Model-GGUF")[::2])
    for quant in ("Q4_K_M", "Q4_K_S", "Q8_0", "IQ4_XS", "--quant"):
        assert quant in line
    line = one_line_error(*fireside_pull(capsys, "acme/Model-GGUF", "--quant", "Q2_K")[::2])
    assert "no Q2_K model" in line and "Q8_0" in line
    line = one_line_error(*fireside_pull(capsys, "acme/Model-GGUF", "--quant", "Q4")[::2])
    assert "matches several" in line
    assert not list(models(tmp_path).rglob("*.gguf")) and registered() == {}


def test_repo_file_path_id_and_revision(hub, tmp_path, capsys):
    hub.add("acme/Multi-GGUF", {"sub/model-Q8_0.gguf": HubFile(gguf_bytes("q8")),
                                "sub/model-Q4_0.gguf": HubFile(gguf_bytes("q4"))})
    code, _, err = fireside_pull(capsys, "acme/Multi-GGUF/sub/model-Q8_0.gguf", "--id", "mine", "--revision", "v1")
    assert code == 0, err
    path = models(tmp_path) / "acme" / "Multi-GGUF" / "sub" / "model-Q8_0.gguf"
    assert path.read_bytes() == gguf_bytes("q8")
    assert registered() == {"mine": {"file": path, "mmproj": None}}
    assert hub.seen("GET", r"^/api/models/acme/Multi-GGUF/revision/v1\b")
    assert hub.seen("HEAD", rf"/resolve/{COMMIT}/sub/model-Q8_0.gguf$")  # pinned to the listed commit
    line = one_line_error(*fireside_pull(capsys, "acme/Multi-GGUF", "--revision", "nope")[::2])
    assert "revision 'nope' not found" in line


def test_split_model_parts_are_fetched_together(hub, tmp_path, capsys):
    parts = {f"big-Q4_K_M-0000{i}-of-00003.gguf": HubFile(gguf_bytes(f"part{i}")) for i in (1, 2, 3)}
    hub.add("acme/Big-GGUF", {**parts, "big-Q8_0.gguf": HubFile(gguf_bytes("other"))})
    code, _, err = fireside_pull(capsys, "acme/Big-GGUF", "--quant", "Q4_K_M")
    assert code == 0, err
    folder = models(tmp_path) / "acme" / "Big-GGUF"
    for name, file in parts.items():
        assert (folder / name).read_bytes() == file.data
    assert not (folder / "big-Q8_0.gguf").exists()
    assert registered() == {"big-q4_k_m": {"file": folder / "big-Q4_K_M-00001-of-00003.gguf", "mmproj": None}}


def test_split_model_with_a_missing_part_is_refused(hub, tmp_path, capsys):
    hub.add("acme/Broken-GGUF", {"m-00001-of-00002.gguf": HubFile(gguf_bytes("p1"))})
    line = one_line_error(*fireside_pull(capsys, "acme/Broken-GGUF")[::2])
    assert "split in 2 parts" in line and registered() == {}


def test_projector_beside_the_model_is_fetched_and_recorded(hub, tmp_path, capsys):
    hub.add("acme/Vision-GGUF", {
        "vision-Q4_K_M.gguf": HubFile(gguf_bytes("vision")),
        "mmproj-vision-f32.gguf": HubFile(gguf_bytes("proj32")),
        "mmproj-vision-f16.gguf": HubFile(gguf_bytes("proj16", 1500), lfs=False),  # checked by git blob id
    })
    code, _, err = fireside_pull(capsys, "acme/Vision-GGUF")
    assert code == 0, err
    folder = models(tmp_path) / "acme" / "Vision-GGUF"
    assert (folder / "mmproj-vision-f16.gguf").read_bytes() == gguf_bytes("proj16", 1500)
    assert not (folder / "mmproj-vision-f32.gguf").exists()
    assert registered() == {"vision-q4_k_m": {"file": folder / "vision-Q4_K_M.gguf",
                                              "mmproj": folder / "mmproj-vision-f16.gguf"}}
    assert 'mmproj = "acme/Vision-GGUF/mmproj-vision-f16.gguf"' in (tmp_path / "config" / "config.toml").read_text()


def test_download_resumes_after_a_cut_connection(hub, tmp_path, capsys, monkeypatch):
    # huggingface_hub writes what it reads in chunks of DOWNLOAD_CHUNK_SIZE (10 MiB) and resumes from the
    # last whole chunk: a small chunk lets a 64 KiB file show it.
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 4096)
    data = gguf_bytes("resume", 64 * 1024)
    hub.add("acme/Resume-GGUF", {"resume-Q4_0.gguf": HubFile(data)})
    hub.cut_first_get["resume-Q4_0.gguf"] = 5 * 4096
    code, _, err = fireside_pull(capsys, "acme/Resume-GGUF")
    assert code == 0, err
    gets = hub.seen("GET", r"^/cdn/acme/Resume-GGUF/resume-Q4_0.gguf$")
    assert len(gets) == 2 and "range" not in gets[0] and gets[1]["range"] == f"bytes={5 * 4096}-"
    path = models(tmp_path) / "acme" / "Resume-GGUF" / "resume-Q4_0.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    assert list(registered()) == ["resume-q4_0"]


def test_checksum_mismatch_is_refused_and_nothing_registered(hub, tmp_path, capsys):
    hub.add("acme/Bad-GGUF", {"bad-Q4_0.gguf": HubFile(gguf_bytes("bad"), listed_sha256="ab" * 32)})
    line = one_line_error(*fireside_pull(capsys, "acme/Bad-GGUF")[::2])
    assert "checksum mismatch" in line and "ab" * 32 in line
    assert not (models(tmp_path) / "acme" / "Bad-GGUF" / "bad-Q4_0.gguf").exists()
    assert registered() == {}


def test_missing_repo_file_or_gguf_are_one_line_errors(hub, tmp_path, capsys):
    line = one_line_error(*fireside_pull(capsys, "acme/Nothing-Here")[::2])
    assert "repository acme/Nothing-Here not found" in line
    hub.add("acme/Docs", {})
    assert "no GGUF files in acme/Docs" in one_line_error(*fireside_pull(capsys, "acme/Docs")[::2])
    hub.add("acme/One-GGUF", {"one-Q4_0.gguf": HubFile(gguf_bytes("one"))})
    line = one_line_error(*fireside_pull(capsys, "acme/One-GGUF/two.gguf")[::2])
    assert "two.gguf is not a GGUF file or folder of acme/One-GGUF" in line and "one-Q4_0.gguf" in line
    assert "not a Hub repo id" in one_line_error(*fireside_pull(capsys, "bad..name/x")[::2])
    assert registered() == {}


def test_gated_repo_takes_the_token_from_the_flag_or_hf_token(hub, tmp_path, capsys, monkeypatch):
    hub.add("acme/Gated-GGUF", {"gated-Q4_0.gguf": HubFile(gguf_bytes("gated"))})
    hub.tokens["acme/Gated-GGUF"] = "hf_secret"
    line = one_line_error(*fireside_pull(capsys, "acme/Gated-GGUF")[::2])
    assert "acme/Gated-GGUF is gated" in line and "HF_TOKEN" in line
    code, _, err = fireside_pull(capsys, "acme/Gated-GGUF", "--token", "hf_secret")
    assert code == 0, err
    assert hub.seen("HEAD", r"/resolve/")[-1]["authorization"] == "Bearer hf_secret"
    (models(tmp_path) / "acme" / "Gated-GGUF" / "gated-Q4_0.gguf").unlink()  # so that it is fetched again
    monkeypatch.setenv("HF_TOKEN", "hf_other")
    hub.tokens["acme/Gated-GGUF"] = "hf_other"
    code, _, err = fireside_pull(capsys, "acme/Gated-GGUF", "--id", "again")
    assert code == 0, err
    assert hub.seen("GET", r"^/api/models/")[-1]["authorization"] == "Bearer hf_other"
    assert hub.seen("HEAD", r"/resolve/")[-1]["authorization"] == "Bearer hf_other"
    assert sorted(registered()) == ["again", "gated-q4_0"]


def test_an_id_that_is_another_models_alias_is_refused_before_downloading(hub, tmp_path, capsys):
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[[models]]\nid = "other"\nfile = "/x/other.gguf"\naliases = ["tiny-q4_0"]\n')
    hub.add("acme/Tiny-GGUF", {"tiny-Q4_0.gguf": HubFile(gguf_bytes("t"))})
    line = one_line_error(*fireside_pull(capsys, "acme/Tiny-GGUF")[::2])
    assert "alias of the model 'other'" in line and not hub.seen("HEAD", r"/resolve/")


@pytest.mark.parametrize(("text", "expected"), [
    ("acme/Repo-GGUF", Target("acme/Repo-GGUF")),
    ("acme/Repo-GGUF/sub/m.gguf", Target("acme/Repo-GGUF", "sub/m.gguf")),
    ("https://huggingface.co/acme/Repo-GGUF/blob/dev/m.gguf?download=true", Target("acme/Repo-GGUF", "m.gguf", "dev")),
    ("hf.co/acme/Repo-GGUF/tree/main/Q4_K_M", Target("acme/Repo-GGUF", "Q4_K_M", "main")),
])
def test_targets(text, expected):
    assert parse_target(text) == expected


def test_quant_labels_and_folders():
    files = [RemoteFile(p) for p in ("Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", "Q4_K_M/m-Q4_K_M-00002-of-00002.gguf",
                                     "UD-IQ1_S/m-UD-IQ1_S.gguf", "mmproj-F16.gguf", "mmproj-BF16.gguf")]
    model, projector = choose(files, Target("a/b", "Q4_K_M"), None)
    assert [p.path for p in model.parts] == [files[0].path, files[1].path] and model.quant == "Q4_K_M"
    assert projector is not None and projector.path == "mmproj-F16.gguf"  # from the repo's top folder
    model, _ = choose(files, Target("a/b"), "iq1_s")
    assert model.first.path == "UD-IQ1_S/m-UD-IQ1_S.gguf"


# --- LoRA adapters (`--base`) ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def adapter_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A LoRA adapter GGUF as convert_lora_to_gguf.py writes it, and a model GGUF of the same tensors
    (general.type "model"), each as bytes for the stand-in to serve."""
    from tests.fixtures.make_tiny_lora import write_adapter

    folder = tmp_path_factory.mktemp("adapters")
    return {"adapter": write_adapter(folder / "adapter.gguf", 3).read_bytes(),
            "model": write_adapter(folder / "model.gguf", 3, broken="not_adapter").read_bytes()}


BASES = '''[[models]]
id = "qwen"
file = "/x/qwen.gguf"
aliases = ["q"]

[[models]]
id = "old-tune"
base = "qwen"
lora = "/x/old-tune.gguf"

[[models]]
id = "far"
upstream = "https://gpu-box.lan:8000/v1"
'''


def write_config(tmp_path: Path, text: str = BASES) -> Path:
    config = tmp_path / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)
    return config


def test_an_adapter_pulled_with_base_is_registered_as_an_adapter(hub, tmp_path, capsys, adapter_files):
    config = write_config(tmp_path)
    hub.add("acme/Tune-LoRA", {"Tune-F16.gguf": HubFile(adapter_files["adapter"]),
                               "mmproj-f16.gguf": HubFile(gguf_bytes("proj"))})
    code, out, err = fireside_pull(capsys, "acme/Tune-LoRA/Tune-F16.gguf", "--base", "q")  # an alias of qwen
    assert code == 0, err
    path = models(tmp_path) / "acme" / "Tune-LoRA" / "Tune-F16.gguf"
    assert path.read_bytes() == adapter_files["adapter"]
    assert not (path.parent / "mmproj-f16.gguf").exists()  # no projector comes along with an adapter
    assert f"added LoRA adapter 'tune-f16' on qwen in {config}" in out
    entry = load_config().find("tune-f16")
    assert entry is not None and (entry.base, entry.file, entry.lora_scale, entry.mmproj) == ("qwen", path, 1.0, None)
    text = config.read_text()
    assert 'base = "qwen"' in text and 'lora = "acme/Tune-LoRA/Tune-F16.gguf"' in text  # relative to the models folder
    assert text.count("file =") == 1  # the base's own
    # Pulled again: the file is in place, the entry updated.
    code, out, err = fireside_pull(capsys, "acme/Tune-LoRA/Tune-F16.gguf", "--base", "qwen")
    assert code == 0, err
    assert "updated LoRA adapter 'tune-f16' on qwen" in out and len(hub.seen("GET", r"^/cdn/")) == 1


def test_an_adapter_without_base_is_refused_naming_base_and_stays_downloaded(hub, tmp_path, capsys, adapter_files):
    write_config(tmp_path)
    hub.add("acme/Tune-LoRA", {"tune-f16.gguf": HubFile(adapter_files["adapter"])})
    line = one_line_error(*fireside_pull(capsys, "acme/Tune-LoRA")[::2])
    assert "tune-f16 is a LoRA adapter, not a model" in line and "--base ID" in line
    assert sorted(registered()) == ["far", "old-tune", "qwen"]
    assert (models(tmp_path) / "acme" / "Tune-LoRA" / "tune-f16.gguf").is_file()
    code, out, err = fireside_pull(capsys, "acme/Tune-LoRA", "--base", "qwen", "--id", "tune")
    assert code == 0, err
    assert "added LoRA adapter 'tune' on qwen" in out
    assert len(hub.seen("GET", r"^/cdn/")) == 1  # not downloaded again
    assert load_config().find("tune").base == "qwen"


@pytest.mark.parametrize(("base", "complaint"), [
    ("nope", "--base 'nope' is not a model in the config"),
    ("old-tune", "--base 'old-tune' is a LoRA adapter on 'qwen'"),
    ("far", "--base 'far' is a model that runs upstream"),
])
def test_a_base_that_is_no_model_of_the_config_is_refused_before_downloading(hub, tmp_path, capsys, adapter_files,
                                                                              base, complaint):
    write_config(tmp_path)
    hub.add("acme/Tune-LoRA", {"tune-f16.gguf": HubFile(adapter_files["adapter"])})
    line = one_line_error(*fireside_pull(capsys, "acme/Tune-LoRA", "--base", base)[::2])
    assert complaint in line and "qwen" in line
    assert not hub.requests  # not even listed
    assert sorted(registered()) == ["far", "old-tune", "qwen"]


def test_an_id_of_another_kind_of_entry_is_refused_before_downloading(hub, tmp_path, capsys, adapter_files):
    write_config(tmp_path)
    hub.add("acme/Tune-LoRA", {"tune-f16.gguf": HubFile(adapter_files["adapter"])})
    line = one_line_error(*fireside_pull(capsys, "acme/Tune-LoRA", "--base", "qwen", "--id", "far")[::2])
    assert "'far' is a model that runs upstream" in line and "--id" in line
    line = one_line_error(*fireside_pull(capsys, "acme/Tune-LoRA", "--base", "qwen", "--id", "qwen")[::2])
    assert "id of the base model" in line
    hub.add("acme/Tiny-GGUF", {"tiny-Q4_0.gguf": HubFile(gguf_bytes("t"))})
    line = one_line_error(*fireside_pull(capsys, "acme/Tiny-GGUF", "--id", "old-tune")[::2])
    assert "'old-tune' is a LoRA adapter on 'qwen' in the config, and this pull adds a model" in line
    assert not hub.seen("HEAD", r"/resolve/") and not models(tmp_path).exists()


def test_base_with_a_model_gguf_is_refused(hub, tmp_path, capsys, adapter_files):
    write_config(tmp_path)
    hub.add("acme/Model-GGUF", {"real-F16.gguf": HubFile(adapter_files["model"]),
                                "fake-Q4_0.gguf": HubFile(gguf_bytes("fake"))})
    line = one_line_error(*fireside_pull(capsys, "acme/Model-GGUF", "--quant", "F16", "--base", "qwen")[::2])
    assert "real-F16 is not a LoRA adapter GGUF (its general.type is 'model'" in line and "without --base" in line
    line = one_line_error(*fireside_pull(capsys, "acme/Model-GGUF", "--quant", "Q4_0", "--base", "qwen")[::2])
    assert "fake-Q4_0 is not a LoRA adapter GGUF (ggml cannot read it as a GGUF" in line
    assert sorted(registered()) == ["far", "old-tune", "qwen"]
    code, _, err = fireside_pull(capsys, "acme/Model-GGUF", "--quant", "F16")  # as a model it is fine
    assert code == 0, err
    assert registered()["real-f16"]["file"] == models(tmp_path) / "acme" / "Model-GGUF" / "real-F16.gguf"


def test_ollama_pull_refuses_an_adapter_and_registers_nothing(hub, tmp_path, adapter_files):
    import asyncio

    from app.api.ollama import pull as ollama_pull

    hub.add("acme/Tune-LoRA", {"tune-f16.gguf": HubFile(adapter_files["adapter"])})

    async def stream() -> list:
        return [item async for item in ollama_pull.pull_stream(None, "hf.co/acme/Tune-LoRA")]  # type: ignore[arg-type]

    answers = asyncio.run(stream())
    assert answers[0].status == "pulling manifest" and not any(a.status == "success" for a in answers[:-1])
    error = answers[-1].error
    assert "tune-f16 is a LoRA adapter, not a model" in error
    assert "`fireside pull acme/Tune-LoRA/tune-f16.gguf --base ID`" in error
    assert registered() == {} and (models(tmp_path) / "acme" / "Tune-LoRA" / "tune-f16.gguf").is_file()
    with pytest.raises(ollama_pull.PullFailed, match="fireside pull acme/Tune-LoRA/tune-f16.gguf --base ID"):
        asyncio.run(ollama_pull.pull_whole(None, "acme/Tune-LoRA"))  # type: ignore[arg-type]
    assert registered() == {}
