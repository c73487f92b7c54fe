"""The package import graph: no cycles, and the leaves stay leaves (every import counts, module-level or inside a
function, since a deferred import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["engine", "perfmodel", "common", "worker", "router", "prefill_server", "decode_server", "kvstore",
            "openai_server", "client", "cli", "launcher", "workload", "bench", "sim"]
GENERATED = {"v1", "testing"}  # protos/: the generated modules import only protobuf and grpc


def imports_of(package: str) -> set[str]:
    """The pdserve packages that modules of ``package`` import."""
    found: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "pdserve" and len(parts) > 1 and parts[1] != package:
                    found.add(parts[1])
    return found


GRAPH = {p: imports_of(p) - GENERATED for p in PACKAGES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_every_package_is_known():
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert on_disk == set(PACKAGES), "add a new package to PACKAGES (and to pyproject.toml)"
    unknown = {dep for deps in GRAPH.values() for dep in deps} - set(PACKAGES)
    assert not unknown, f"imports of packages that do not exist: {unknown}"


def test_no_package_import_cycles():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("leaf", ["engine", "perfmodel"])
def test_engine_and_perfmodel_import_nothing_else_of_pdserve(leaf):
    assert GRAPH[leaf] == set()


def test_common_imports_no_service():
    assert GRAPH["common"] <= {"engine", "perfmodel"}


def test_services_do_not_import_each_other():
    services = {"router", "prefill_server", "decode_server", "openai_server"}
    for service in services:
        assert not GRAPH[service] & (services - {service}), service
