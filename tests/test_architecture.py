"""The architecture as rules a test can hold, instead of size limits (issue 35): a size rule
shaped the splits (helpers moved to another file kept names that say "this file only"), these
rules say what the layout is for.

- No module imports another module's underscore (private) names: a helper two modules share
  has a public name, in its module's `__all__`.
- `core/` imports no framework: every module under it, read with `ast`, every import
  (top level, inside functions, under `TYPE_CHECKING`).
- Every package declares `__all__`, and it is exactly what the package exports (the rule is in
  `test_every_package_all_is_exactly_what_it_exports`).
- The SQL dialect is asked in one module: `dialect.name` appears in `store/dialect.py` alone.

The layer rule (one way, no circle, lazy and `TYPE_CHECKING` imports included) is in
`tests/test_layers.py`. Every check reads the source with `ast`; nothing is imported but the
packages themselves, for `__all__`.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "bounded_agents"

PRIVATE_IMPORTS_ALLOWED_IN: tuple[str, ...] = ()
"""Importers allowed to take another module's underscore names, by dotted prefix: none. (The
turn was the last; it is values and functions now.) Nothing may join it."""
PRIVATE_IMPORTS_ALLOWED_MODULES: frozenset[str] = frozenset()

FRAMEWORKS = frozenset(
    {
        "aiosqlite",
        "alembic",
        "asyncpg",
        "dbos",
        "fastapi",
        "fastapi_offline",
        "httpx",
        "jinja2",
        "openai",
        "opentelemetry",
        "prometheus_client",
        "psycopg",
        "pydantic_settings",
        "sqlalchemy",
        "sse_starlette",
        "starlette",
        "tenacity",
        "uvicorn",
    }
)
"""What `core/` may not import: web, database, HTTP-client, telemetry, retry and runtime
libraries. Pydantic is not on it: the contract types are pydantic models."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def library_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def imports(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """Every import of the file, wherever it sits (top level, in a function, under
    `TYPE_CHECKING`): (line, absolute module, imported name or None for `import module`)."""
    me = module_name(path)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = me.split(".")
                if path.name != "__init__.py":
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            for alias in node.names:
                yield node.lineno, module, alias.name


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(path: Path) -> list[str]:
    """The underscore names (or modules) `path` imports from another module. A private module
    (`pkg/_frozen.py`) is its package's: importing it from inside that package is fine."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: list[str] = []
    for line, module, name in imports(path):
        if module == me:
            continue
        if name is not None and _private(name):
            found.append(f"{me}:{line} imports {name} from {module}")
        parts = module.split(".")
        for depth, part in enumerate(parts):
            owner = ".".join(parts[:depth])
            if _private(part) and not (package + ".").startswith(owner + "."):
                found.append(f"{me}:{line} imports the private module {module}")
                break
    return found


def _allowed_private(module: str) -> bool:
    return module in PRIVATE_IMPORTS_ALLOWED_MODULES or (
        bool(PRIVATE_IMPORTS_ALLOWED_IN) and module.startswith(PRIVATE_IMPORTS_ALLOWED_IN)
    )


def test_no_module_imports_another_modules_underscore_names() -> None:
    wrong = [
        found
        for path in library_files()
        if not _allowed_private(module_name(path))
        for found in private_imports(path)
    ]
    assert wrong == []


def test_the_private_import_rule_sees_lazy_relative_and_private_module_imports(
    tmp_path: Path,
) -> None:
    """So the rule above can fail: each spelling of a private import is caught."""
    global ROOT
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "_hidden.py").write_text("X = 1\n")
    (package / "sub" / "own.py").write_text("from pkg.sub._hidden import X\n")
    (package / "mod.py").write_text(
        "from pkg.other import _helper\n"
        "def f():\n"
        "    from .other import _lazy\n"
        "from pkg.sub._hidden import X\n"
        "from pkg.other import public\n"
    )
    saved, ROOT = ROOT, tmp_path
    try:
        assert private_imports(package / "mod.py") == [
            "pkg.mod:1 imports _helper from pkg.other",
            "pkg.mod:4 imports the private module pkg.sub._hidden",
            "pkg.mod:3 imports _lazy from pkg.other",
        ]
        assert private_imports(package / "sub" / "own.py") == []
    finally:
        ROOT = saved


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "core").rglob("*.py")), ids=lambda p: module_name(p)
)
def test_core_imports_no_framework(path: Path) -> None:
    used = {module.split(".")[0] for _, module, _ in imports(path)}
    assert used & FRAMEWORKS == set()


def _packages() -> list[str]:
    return sorted(module_name(init) for init in PACKAGE.rglob("__init__.py"))


def _bound_by_init(init: Path) -> set[str]:
    """The public names an `__init__` binds on purpose: what it imports from this library
    (under `TYPE_CHECKING` too: a lazily loading package exports those) and what it defines
    (functions, classes, assignments). Imports from outside the library (`import_module`,
    `TYPE_CHECKING`) are its tools, not its exports."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                visit(node.body)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "bounded_agents"
            ):
                names.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)

    visit(ast.parse(init.read_text(encoding="utf-8")).body)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("package", _packages())
def test_every_package_all_is_exactly_what_it_exports(package: str) -> None:
    """The rule: a package's `__init__` declares `__all__`; each name in it is listed once and
    resolves on the package (through `__getattr__` for one that loads its names on first use);
    and every public name the `__init__` binds on purpose (imports from this library, or
    defines) is in it. A submodule is not an export: it is reached by importing it, not listed,
    unless the `__init__` imports it by name as a namespace (`bounded_agents.store.direct`).
    A name is public unless it starts with an underscore."""
    init = ROOT / package.replace(".", "/") / "__init__.py"
    loaded = importlib.import_module(package)
    listed = getattr(loaded, "__all__", None)
    assert listed is not None, f"{package} has no __all__"
    assert len(listed) == len(set(listed)), "a name listed twice"
    missing_on_package = [name for name in listed if not hasattr(loaded, name)]
    assert missing_on_package == []
    assert _bound_by_init(init) - set(listed) == set(), "public names left out of __all__"


DIALECT_SWITCH = re.compile(r"\bdialect\.name\b|get_backend_name\(")


def test_the_sql_dialect_is_asked_in_one_module() -> None:
    """`dialect.name` (or a URL's backend name) appears in `store/dialect.py` alone: every
    other module asks it for a `SqlDialect` and reads its flags."""
    asking = sorted(
        module_name(path)
        for path in library_files()
        if DIALECT_SWITCH.search(path.read_text(encoding="utf-8"))
    )
    assert asking == ["bounded_agents.store.dialect"]
