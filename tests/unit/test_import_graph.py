"""The package import graph: no cycles, the leaves stay leaves, and engine/'s parts keep their layers (every import
counts, module-level or inside a function, since a deferred import is still a dependency)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests import REPO_ROOT
from tests.layout import GENERATED, installed_packages, package_folders

ROOT = REPO_ROOT
FOLDERS = package_folders()
PACKAGES = list(FOLDERS)


@functools.cache
def import_nodes(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """One file's import statements (each file parsed once for all the tests)."""
    return [n for n in ast.walk(ast.parse(path.read_text(), str(path))) if isinstance(n, (ast.Import, ast.ImportFrom))]


def imports_of(package: str) -> set[str]:
    """The pdserve packages that modules of ``package`` import."""
    found: set[str] = set()
    for path in FOLDERS[package].rglob("*.py"):
        for node in import_nodes(path):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "pdserve" and len(parts) > 1 and parts[1] != package:
                    found.add(parts[1])
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """The package graph, parsed when a test first asks (not while pytest collects, on every xdist worker)."""
    return {p: imports_of(p) - GENERATED for p in PACKAGES}


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


def test_every_package_on_disk_is_installed():
    on_disk = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert on_disk == set(PACKAGES), "add the new package to pyproject.toml's packages and package-dir"
    listed = set(installed_packages())
    for name, folder in FOLDERS.items():
        for init in folder.rglob("__init__.py"):
            dotted = ".".join(["pdserve", name, *init.parent.relative_to(folder).parts])
            assert dotted in listed, f"{init.parent} is missing from pyproject.toml's packages"
    unknown = {dep for deps in graph().values() for dep in deps} - set(PACKAGES)
    assert not unknown, f"imports of packages that do not exist: {unknown}"


def test_no_package_import_cycles():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("leaf", ["engine", "perfmodel"])
def test_engine_and_perfmodel_import_nothing_else_of_pdserve(leaf):
    assert graph()[leaf] == set()


def test_common_imports_no_service():
    assert graph()["common"] <= {"engine", "perfmodel"}


def test_only_commons_scheduling_needs_the_performance_model():
    """common/ resolves a modeled deployment into a scheduler (scheduling.py); nothing else of it needs perfmodel
    (the process-info labels come from the worker's config)."""
    users = {p.name for p in FOLDERS["common"].rglob("*.py")
             if any(n.startswith("pdserve.perfmodel") for n in _module_imports(p))}
    assert users == {"scheduling.py"}


def test_services_do_not_import_each_other():
    services = {"router", "prefill_server", "decode_server", "openai_server"}
    for service in services:
        assert not graph()[service] & (services - {service}), service


def _is_module(dotted: str) -> bool:
    parts = dotted.split(".")
    if len(parts) < 2 or parts[1] not in FOLDERS:
        return False
    path = FOLDERS[parts[1]].joinpath(*parts[2:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_imports(path: Path) -> set[str]:
    """The dotted pdserve modules one file imports (``from a.b import c`` counts ``a.b.c`` when c is a module)."""
    found: set[str] = set()
    for node in import_nodes(path):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                child = f"{node.module}.{a.name}"
                found.add(child if _is_module(child) else node.module)
    return {name for name in found if name.startswith("pdserve.")}


def engine_part(dotted: str) -> str | None:
    """``model.kernels``, ``model``, ``kv``, ``sched``, ``text`` or ``top`` for a pdserve.engine module."""
    parts = dotted.split(".")[2:]
    if not parts:
        return None
    if parts[:2] == ["model", "kernels"]:
        return "model.kernels"
    return parts[0] if parts[0] in ("model", "kv", "sched", "text") and len(parts) > 1 else "top"


# What each part of engine/ may import besides itself ("top" is engine/'s own modules: runtime, the engine loop, the
# request's parameters and sequence, the GGUF header). Kernels are the floor; text knows nothing of the model.
ENGINE_LAYERS = {
    "model.kernels": set(),
    "kv": {"model.kernels", "top"},
    "text": {"top"},
    "model": {"model.kernels", "kv", "text", "top"},
    "sched": {"kv", "text", "top"},
}
ENGINE_TOP_MAY_IMPORT = {  # the few top modules the parts may lean on: leaves, not the loop
    "pdserve.engine.params", "pdserve.engine.gguf_file", "pdserve.engine.sequence"}


def engine_violations() -> list[str]:
    out = []
    for path in FOLDERS["engine"].rglob("*.py"):
        rel = path.relative_to(FOLDERS["engine"]).with_suffix("")
        own = engine_part(".".join(["pdserve", "engine", *rel.parts]))
        if own == "top":
            continue
        for name in _module_imports(path):
            if not name.startswith("pdserve.engine."):
                continue
            part = engine_part(name)
            if part in (None, own) or (own == "model" and part == "model.kernels"):
                continue
            if part not in ENGINE_LAYERS[own] or (part == "top" and name not in ENGINE_TOP_MAY_IMPORT):
                out.append(f"engine/{rel.as_posix()}.py imports {name}")
    return out


def test_engine_parts_keep_their_layers():
    assert engine_violations() == []


def test_engine_layer_check_sees_a_violation(tmp_path, monkeypatch):
    bad = tmp_path / "engine" / "text"
    bad.mkdir(parents=True)
    (bad / "oops.py").write_text("from pdserve.engine.model.llama import LlamaModel\n")
    monkeypatch.setitem(FOLDERS, "engine", tmp_path / "engine")
    assert engine_violations() == ["engine/text/oops.py imports pdserve.engine.model.llama"]


@pytest.mark.parametrize("package", ["engine", "bench"])
def test_at_most_eight_modules_at_the_top(package):
    top = sorted(p.name for p in FOLDERS[package].glob("*.py"))
    assert len(top) <= 8, top


def test_services_reach_the_kvstore_through_its_contract_not_its_store():
    """The KV hand-off's rules and constants have one owner (kvstore/contract.py); the store is the kvstore's own."""
    for service in ("router", "prefill_server", "decode_server", "worker", "openai_server"):
        for path in FOLDERS[service].rglob("*.py"):
            assert "pdserve.kvstore.store" not in _module_imports(path), path


def test_only_the_kvstores_fault_service_imports_the_test_protos():
    """The test-only fault call lives beside the test protos (tests/kv_faults.py), not in a production client."""
    allowed = {FOLDERS["kvstore"] / "faults.py", FOLDERS["kvstore"] / "main.py"}
    for folder in FOLDERS.values():
        for path in folder.rglob("*.py"):
            if path not in allowed:
                assert not any(n.startswith("pdserve.testing") for n in _module_imports(path)), path


TEST_THEMES = {"security", "faults", "docs", "deploy", "protos", "examples"}  # stack-wide concerns and non-packages


@pytest.mark.parametrize("kind", ["unit", "stack"])
def test_tests_mirror_the_source_tree(kind):
    """A test lives in the folder of the package it exercises (or of a stack-wide theme), not flat beside the rest."""
    folder = ROOT / "tests" / kind
    flat = sorted(p.name for p in folder.glob("test_*.py") if p.name != "test_import_graph.py")
    assert flat == [], f"move these into tests/{kind}/<package>/"
    unknown = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"
                     and p.name not in FOLDERS and p.name not in TEST_THEMES)
    assert unknown == [], "name a test folder after a package or add the theme to TEST_THEMES"
