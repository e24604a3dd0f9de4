"""The names `from bounded_agents import ...` promises: the same list for the type checker (the
`TYPE_CHECKING` imports), for `import *` (`__all__`) and at run time (`__getattr__`), and typed,
not `Any`, in a user's `mypy --strict`."""

from __future__ import annotations

import ast
import site
import textwrap
from importlib import import_module
from pathlib import Path

import mypy.api
import pytest

import bounded_agents

PACKAGE_ROOT = Path(bounded_agents.__file__).resolve().parents[1]
"""The directory `bounded_agents` was imported from: site-packages, or this checkout when the
package is installed editable."""


def _type_checking_imports() -> dict[str, str]:
    """{name: defining module} of the imports under `if TYPE_CHECKING:` in `__init__.py`, read
    from its source: what a type checker sees the package export."""
    tree = ast.parse(Path(bounded_agents.__file__).read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module is not None
                found.update({alias.name: stmt.module for alias in stmt.names})
    return found


def test_all_lists_exactly_the_names_the_type_checker_sees_exported() -> None:
    assert sorted(bounded_agents.__all__) == sorted(_type_checking_imports())
    assert {"AgentModule", "HistoryConfig", "agent", "tool"} <= set(bounded_agents.__all__)


@pytest.mark.parametrize("name", sorted(bounded_agents.__all__))
def test_each_public_name_is_at_run_time_the_object_its_module_defines(name: str) -> None:
    where = _type_checking_imports()[name]
    found = getattr(bounded_agents, name)
    assert found is getattr(import_module(where), name)
    assert found.__module__ == where


def test_dir_lists_every_public_name_before_it_is_loaded() -> None:
    assert set(bounded_agents.__all__) <= set(dir(bounded_agents))


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="no attribute 'AgentModul'"):
        _ = bounded_agents.AgentModul  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        exec("from bounded_agents import AgentModul", {})


USER_CODE = """\
from bounded_agents import AgentModule, HistoryConfig, agent, tool

reveal_type(AgentModule)
reveal_type(HistoryConfig)
reveal_type(agent)
reveal_type(tool)
reveal_type(AgentModule.for_root)
reveal_type(AgentModule.for_root(history=HistoryConfig(max_messages=10)))
"""
MISTAKE = """\
from bounded_agents import AgentModule

AgentModule.for_root(quota="plenty")
"""
"""A mistake only a typed `for_root` catches: with `Any` it would pass."""
EXPECTED = [
    ("AgentModule", "def (*, settings: bounded_agents.settings.Settings, "),
    ("AgentModule", "-> bounded_agents.module.AgentModule"),
    ("HistoryConfig", "def (*, enabled: bool =, max_messages: int | None =, "),
    ("HistoryConfig", "-> bounded_agents.core.history.config.HistoryConfig"),
    ("agent", "def (*, name: str, system_prompt: str =, "),
    ("agent", "-> def [C <: type] (C) -> C"),
    ("tool", "Overload(def [F <: def (*Any, **Any) -> typing.Awaitable[Any]] (F) -> F, "),
    ("tool", "def (*, name: str | None =) -> def [F <: "),
    ("for_root", "def (*, model: bounded_agents.core.ports.model.ModelProvider | None =, "),
    ("for_root", "-> bounded_agents.module.AgentModule"),
    ("for_root(...)", "bounded_agents.module.AgentModule"),
]
"""(which reveal, a piece of the type mypy must reveal for it), in USER_CODE's order."""


def _mypy_config(tmp_path: Path) -> Path:
    """A user's strict configuration (none of this repository's plugins), that finds the package
    where it was imported from. Installed in site-packages, mypy finds it and keeps the package's
    own errors to itself; an editable install's import hook is invisible to mypy, so its
    directory is named, and its errors are kept quiet the same way (this repository's own
    `mypy --strict` judges them, with its pydantic plugin)."""
    lines = ["[mypy]", "strict = True", f"cache_dir = {tmp_path / 'cache'}"]
    if str(PACKAGE_ROOT) not in {*site.getsitepackages(), site.getusersitepackages()}:
        lines += [
            f"mypy_path = {PACKAGE_ROOT}",
            "[mypy-bounded_agents.*]",
            "follow_imports = silent",
        ]
    config = tmp_path / "mypy.ini"
    config.write_text("\n".join(lines) + "\n")
    return config


def test_a_users_mypy_strict_sees_every_public_name_typed_not_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no checkout on the search path but the one named
    (tmp_path / "user.py").write_text(USER_CODE)
    (tmp_path / "mistake.py").write_text(MISTAKE)
    config = _mypy_config(tmp_path)
    out, err, _status = mypy.api.run(["--config-file", str(config), "user.py", "mistake.py"])
    lines = out.splitlines()
    assert err == "", err
    assert "import-not-found" not in out, out

    errors = [line for line in lines if ": error: " in line]
    assert len(errors) == 1, out  # none in user.py
    [mistake] = errors
    assert mistake.startswith("mistake.py:3: error: ") and "[arg-type]" in mistake, out

    revealed = [
        line.split('Revealed type is "', 1)[1].removesuffix('"')
        for line in lines
        if line.startswith("user.py:") and "Revealed type is" in line
    ]
    assert len(revealed) == USER_CODE.count("reveal_type("), out
    assert "Any" not in revealed, out
    names = ["AgentModule", "HistoryConfig", "agent", "tool", "for_root", "for_root(...)"]
    by_reveal = dict(zip(names, revealed, strict=True))
    for reveal, piece in EXPECTED:
        assert piece in by_reveal[reveal], textwrap.shorten(f"{reveal}: {by_reveal[reveal]}", 400)


def test_the_paths_the_docs_once_named_still_serve_the_same_objects() -> None:
    """Moved, not removed (issue 35): the README's `bounded_agents.http.openai_api` and
    `bounded_agents.http.auth` re-export what now lives in `http/openai/` and `actors.py`."""
    from bounded_agents import actors
    from bounded_agents.http import auth, build_openai_router, openai_api

    assert openai_api.build_openai_router is build_openai_router
    assert auth.Actor is actors.Actor and auth.default_resolver is actors.default_resolver
    assert bounded_agents.Actor is actors.Actor
