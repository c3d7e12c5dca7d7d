"""The shape of the package, checked on its source: no import cycle between modules, ONNX
attributes read only in the graph layer, the network layers importing only downwards, and
no oversized module in the network rooms."""

from __future__ import annotations

import ast
import os
import re

import pytest

SRC = os.path.join(os.path.dirname(__file__), os.pardir, "src")
PKG = os.path.join(SRC, "tensorlayout")


def _modules():
    mods = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, SRC)[:-3].replace(os.sep, ".")
                mods[name[:-9] if name.endswith(".__init__") else name] = path
    return mods


def _imports(mods, name, path):
    """The package modules ``name`` imports anywhere in its body (functions included):
    ``from P import x`` counts as P.x when that is a module, else as P."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    is_pkg = path.endswith("__init__.py")
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix
                       for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in mods and t != name)
    return out


def _cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph():
    mods = _modules()
    return mods, {m: _imports(mods, m, p) for m, p in mods.items()}


def test_the_checker_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle(graph):
    _, edges = graph
    assert _cycles(edges) == []


def _room(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_network_layers_import_only_downwards(graph):
    """graph <- schedule <- backends <- model <- cli: no layer imports one above it, and
    nothing below the network layers (layouts, images, npu, opencl, winograd) imports them."""
    _, edges = graph
    level = {"graph": 1, "schedule": 2, "backends": 3, "model": 4, "cli": 5, "cli_parts": 5,
             "__main__": 6, "_warm": 6}
    bad = []
    for m, targets in edges.items():
        lm = level.get(_room(m), 0)
        for t in targets:
            lt = level.get(_room(t), 0)
            if lt > lm:
                bad.append(f"{m} -> {t}")
    assert bad == []


_ATTR = re.compile(r"\.attrs\b|get_attribute_value|\.attribute\b")


def test_onnx_attributes_are_read_in_the_graph_layer_only():
    bad = []
    for name, path in _modules().items():
        if _room(name) == "graph":
            continue
        for i, line in enumerate(open(path, encoding="utf-8"), 1):
            if _ATTR.search(line):
                bad.append(f"{name}:{i}: {line.strip()}")
    assert bad == []


def test_network_rooms_have_no_oversized_module():
    sizes = {name: sum(1 for _ in open(path, encoding="utf-8")) for name, path in _modules().items()
             if _room(name) in ("graph", "schedule", "backends")}
    assert sizes and {n: s for n, s in sizes.items() if s > 550} == {}
