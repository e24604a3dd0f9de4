"""The layers point one way: core <- store/durable/providers <- persistence/module <- http.

`module.py` is the composition root: it may reach the HTTP layer only from inside a function
(when a module is built), never on import, so importing any of them in any order works and no
import circle can form between the module and its routes.
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
    f"bounded_agents.http.{p.stem}" for p in (PACKAGE / "http").glob("*.py") if p.stem != "__init__"
)
LAYERS = ("core", ("store", "durable", "providers"), ("persistence", "module"), "http")
"""Lowest first: a layer may import those before it, never those after it (at top level)."""


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "bounded_agents" or len(parts) < 2:
        return None
    for rank, names in enumerate(LAYERS):
        if parts[1] in ((names,) if isinstance(names, str) else names):
            return rank
    return None


def _top_level_imports(path: Path) -> list[str]:
    """What a file imports when it is imported: module-level statements, not those under
    `if TYPE_CHECKING:` nor inside functions."""
    found: list[str] = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def test_every_layer_imports_only_the_layers_below_it_at_top_level() -> None:
    wrong: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = "bounded_agents." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        rank = _layer(importer)
        if rank is None:
            continue
        for imported in _top_level_imports(path):
            to = _layer(imported)
            if to is not None and to > rank:
                wrong.append(f"{importer} imports {imported}")
    assert wrong == []


def test_module_py_imports_nothing_of_http_at_top_level() -> None:
    imports = _top_level_imports(PACKAGE / "module.py")
    assert [name for name in imports if name.startswith("bounded_agents.http")] == []


@pytest.mark.parametrize("first", [*HTTP_MODULES, "bounded_agents.module", "bounded_agents"])
def test_each_http_module_and_the_module_import_first_in_a_fresh_interpreter(first: str) -> None:
    """Whichever is imported first, the rest follow without an ImportError."""
    rest = [m for m in (*HTTP_MODULES, "bounded_agents.module") if m != first]
    script = f"import {first}\n" + "".join(f"import {m}\n" for m in rest)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_module_names_the_same_local_actor_as_http_auth() -> None:
    assert LOCAL_ACTOR_ID == LOCAL_ACTOR
