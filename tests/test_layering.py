"""The layers hold: read every import of the project's packages (AST, not a run) and fail with the
offending line.

- `backends` (what produces tokens) imports neither `app` nor `templates`;
- `templates` and `grammars` (chat formats, constrained decoding) import neither `app` nor `backends`;
- inside `app`: the request pipeline (`app.pipeline`) imports nothing of the HTTP server, the doors
  or the CLI; a front door (`app.api.<door>`) imports no other door, nor the server or the CLI (what
  two doors need lives in `app.api.common`, which imports no door);
- no import circle anywhere, counting every import: module level, inside functions and under
  `TYPE_CHECKING` (a circle hidden there is still two modules that each need the other), and none
  between packages either (`app.api.<door>`, `app.pipeline`, `app.server`, ... taken whole).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "backends", "templates", "grammars")
FORBIDDEN = {
    "backends": ("app", "templates"),
    "templates": ("app", "backends"),
    "grammars": ("app", "backends"),
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the project module it imports
    where: str  # path:line: the statement

    def __str__(self) -> str:
        return f"{self.where}  ({self.module} -> {self.target})"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` refers to (the longest existing prefix), None outside the project."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def project_imports() -> list[Import]:
    modules = _modules()
    found = []
    for module, path in modules.items():
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source, str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, path, node)
                # `from pkg import sub` imports the submodule when there is one, else a name of pkg
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}"
            for name in names:
                target = _resolve(name, modules)
                if target is not None and target != module:
                    found.append(Import(module, target, where))
    return found


def _package(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_never_imports_the_layers_above_it(layer: str) -> None:
    offending = [str(i) for i in project_imports()
                 if _package(i.module) == layer and _package(i.target) in FORBIDDEN[layer]]
    assert not offending, f"{layer} must not import {' or '.join(FORBIDDEN[layer])}:\n" + "\n".join(offending)


def _cycle(graph: dict[str, list[Import]]) -> list[Import] | None:
    """One import circle (its edges in order), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[Import] = []

    def visit(module: str) -> list[Import] | None:
        state[module] = 1
        for edge in graph.get(module, []):
            if state.get(edge.target) == 1:
                start = next(i for i, e in enumerate(path) if e.module == edge.target) if path else 0
                return [*path[start:], edge]
            if edge.target not in state:
                path.append(edge)
                found = visit(edge.target)
                if found:
                    return found
                path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_no_import_circles() -> None:
    graph: dict[str, list[Import]] = {}
    for edge in project_imports():
        graph.setdefault(edge.module, []).append(edge)
    circle = _cycle(graph)
    assert circle is None, "an import circle:\n" + "\n".join(str(edge) for edge in circle or [])


def test_the_checks_see_imports() -> None:
    """The scan finds imports in all their forms (else the tests above would pass on nothing)."""
    edges = {(i.module, i.target) for i in project_imports()}
    assert ("backends.engine", "backends.jobs") in edges  # from backends.jobs import (...)
    assert any(module.startswith("app") and target.startswith("backends") for module, target in edges)
    assert _cycle({"a": [Import("a", "b", "a:1")], "b": [Import("b", "a", "b:1")]}) is not None


def unit(module: str) -> str:
    """The package a module belongs to, as the layers count them: `app.api.<door>` and
    `app.<role>` inside `app`, the top-level package elsewhere."""
    parts = module.split(".")
    if parts[0] != "app" or len(parts) == 1:
        return parts[0]
    if parts[1] == "api" and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


DOOR_SHARED = "app.api.common"
# what a unit of `app` must never import, beside the rules on doors
APP_FORBIDDEN = {
    "app.pipeline": ("app.server", "app.api", "app.cli"),
    "app.media": ("app.server", "app.api", "app.cli"),
    "app.settings": ("app.server", "app.api", "app.cli", "app.pipeline"),
    DOOR_SHARED: ("app.server", "app.cli"),
}


def _is_door(name: str) -> bool:
    return name.startswith("app.api.") and name != DOOR_SHARED


def layering_faults(imports: list[Import]) -> list[str]:
    faults = []
    for edge in imports:
        source, target = unit(edge.module), unit(edge.target)
        if source == target:
            continue
        forbidden = APP_FORBIDDEN.get(source, ())
        if any(target == f or target.startswith(f + ".") for f in forbidden):
            faults.append(f"{source} must not import {target}: {edge}")
        elif _is_door(source) and (_is_door(target) or target in ("app.server", "app.cli")):
            faults.append(f"a front door imports {target}: {edge}")
        elif source == DOOR_SHARED and _is_door(target):
            faults.append(f"app.api.common imports a door: {edge}")
    return faults


def test_the_pipeline_and_the_doors_keep_their_layers() -> None:
    faults = layering_faults(project_imports())
    assert not faults, "\n".join(faults)


def test_no_import_circles_between_packages() -> None:
    graph: dict[str, list[Import]] = {}
    for edge in project_imports():
        source, target = unit(edge.module), unit(edge.target)
        if source != target:
            graph.setdefault(source, []).append(Import(source, target, edge.where))
    circle = _cycle(graph)
    assert circle is None, "a circle between packages:\n" + "\n".join(str(edge) for edge in circle or [])


def test_the_layer_rules_catch_what_they_name() -> None:
    """Each rule fails on the import it forbids (else the tests above could pass on nothing)."""
    def edge(source: str, target: str) -> Import:
        return Import(source, target, f"{source}:1")
    assert layering_faults([edge("app.pipeline.run", "app.server.request_log")])
    assert layering_faults([edge("app.api.tgi.shaper", "app.api.fireworks.chat")])
    assert layering_faults([edge("app.api.ollama.pull", "app.cli.pull")])
    assert layering_faults([edge("app.api.common.errors", "app.api.anthropic.errors")])
    assert not layering_faults([edge("app.api.tgi.shaper", "app.api.common.streams"),
                                edge("app.server.app", "app.api.tgi.routes")])
    assert unit("app.api.tgi.shaper") == "app.api.tgi" and unit("app.pipeline.upstream.body") == "app.pipeline"
