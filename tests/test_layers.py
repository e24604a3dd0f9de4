"""The layers point one way, with no import circle, counting EVERY import: top level, inside
functions (lazy) and under `TYPE_CHECKING` alike. A lazy import is a dependency all the same
(it only moves the failure to the first call), and a `TYPE_CHECKING` one is a dependency of the
types, which is how a circle first gets written.

    errors, redact                          stdlib only
    core                                    the turn, its types and ports (no framework)
    store, providers, observability,        implement the ports / read settings / describe
      actors, settings, registry, outcome,    agents, each on core alone
      testing, settings_checks
    durable                                 the run journal, on the store's public surface
    persistence, wiring                     choose store, journal and ledger; make the rest
    module                                  the composition root (`AgentModule`)
    http                                    the routes: built from a module, never by it
    cli, __main__                           the command line

`module.py` imports nothing of `http` at any depth: the application builds the routes from the
module (`bounded_agents.http.build_router(module)`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bounded_agents.http.auth import LOCAL_ACTOR
from bounded_agents.module import LOCAL_ACTOR_ID

PACKAGE = Path(__file__).resolve().parent.parent / "bounded_agents"
HTTP_MODULES = sorted(
    "bounded_agents."
    + ".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
    for p in (PACKAGE / "http").rglob("*.py")
)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "redact", "startup"),
    ("core",),
    (
        "store",
        "providers",
        "observability",
        "actors",
        "settings",
        "settings_checks",
        "registry",
        "outcome",
        "testing",
    ),
    ("durable", "integrations"),
    ("persistence", "wiring"),
    ("module",),
    ("http",),
    ("cli", "__main__"),
)
"""Lowest first: a layer may import those before it and its own, never those after it."""


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "bounded_agents" or len(parts) < 2:
        return None
    for rank, names in enumerate(LAYERS):
        if parts[1] in names:
            return rank
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["bounded_agents", *parts])


def _all_imports(path: Path) -> list[str]:
    """Every module the file names in an import, wherever the import sits, made absolute; for
    `from package import name`, `package.name` when that is a module, else `package`."""
    me = _module_name(path)
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = me.split(".")
                if path.name != "__init__.py":
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.append(sub if sub in MODULES else module)
    return found


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {
    name: sorted({i for i in _all_imports(path) if i in MODULES} - {name})
    for name, path in MODULES.items()
}
"""Module -> the library modules it imports, at any depth. Importing `a.b.c` also runs the
package `a.b`'s `__init__`, but that is not an edge here: a package re-exporting its own
modules is the package pattern, not a circle (`from a.b import name` IS an edge to `a.b`)."""


def test_every_library_module_has_a_layer() -> None:
    assert [m for m in MODULES if m != "bounded_agents" and _layer(m) is None] == []


def test_every_layer_imports_only_its_own_and_the_layers_below_it_at_any_depth() -> None:
    wrong: list[str] = []
    for importer, imported in GRAPH.items():
        rank = _layer(importer)
        if rank is None:
            continue
        wrong += [f"{importer} imports {i}" for i in imported if (_layer(i) or 0) > rank]
    assert wrong == []


def _circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, []):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_counting_lazy_and_type_checking_imports() -> None:
    assert _circles(GRAPH) == []


def test_the_circle_finder_finds_a_circle_through_three_modules() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": []}
    assert _circles(graph) == [["a", "b", "c"]]


def test_module_py_imports_nothing_of_http_at_any_depth() -> None:
    assert [i for i in GRAPH["bounded_agents.module"] if i.startswith("bounded_agents.http")] == []
    source = (PACKAGE / "module.py").read_text()
    assert "import_module" not in source and "__import__" not in source  # no import by string


@pytest.mark.parametrize("first", [*HTTP_MODULES, "bounded_agents.module", "bounded_agents"])
def test_each_http_module_and_the_module_import_first_in_a_fresh_interpreter(first: str) -> None:
    """Whichever is imported first, the rest follow without an ImportError."""
    rest = [m for m in (*HTTP_MODULES, "bounded_agents.module") if m != first]
    script = f"import {first}\n" + "".join(f"import {m}\n" for m in rest)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_module_names_the_same_local_actor_as_http_auth() -> None:
    assert LOCAL_ACTOR_ID == LOCAL_ACTOR
