"""`build_router(module)` builds the routes; `module.router`, which built them inside the module
before, works one more release with a `DeprecationWarning`, without `bounded_agents.module`
importing `bounded_agents.http` (the routes register the factory it calls)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from fastapi.routing import APIRoute

from bounded_agents.http import build_router
from tests.http.conftest import ModuleFactory


def _paths(router: object) -> list[tuple[str, tuple[str, ...]]]:
    routes = getattr(router, "routes", [])
    return sorted((r.path, tuple(sorted(r.methods))) for r in routes if isinstance(r, APIRoute))


def test_module_router_warns_and_serves_the_routes_build_router_builds(
    make_module: ModuleFactory,
) -> None:
    module = make_module()
    with pytest.warns(DeprecationWarning, match=r"build_router\(module\)"):
        first = module.router
    with pytest.warns(DeprecationWarning):
        again = module.router
    assert again is first  # built once, as it was when the module built it on creation
    assert _paths(first) == _paths(build_router(module))
    assert ("/agents/{agent}/threads", ("POST",)) in _paths(first)


SCRIPT = """
import sys, warnings
from bounded_agents.durable import InlineRuntime
from bounded_agents.errors import ConfigError
from bounded_agents.providers import EchoModel
from bounded_agents.settings import Settings
from bounded_agents.store import MemoryStore
from bounded_agents.store.ledger import MemoryLedger
{import_module}

module = AgentModule.for_root(
    store=MemoryStore(), journal=InlineRuntime(), ledger=MemoryLedger(), model=EchoModel(),
    settings=Settings(migrate_on_start=False),
)
print("http imported:", any(m.startswith("bounded_agents.http") for m in sys.modules))
warnings.simplefilter("ignore", DeprecationWarning)
try:
    print("routes:", len(module.router.routes))
except ConfigError as exc:
    print("refused:", exc)
"""


def _run(import_module: str) -> str:
    script = textwrap.dedent(SCRIPT).format(import_module=import_module)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_module_built_without_http_imports_none_of_it_and_router_names_the_way_out() -> None:
    out = _run("from bounded_agents.module import AgentModule")
    assert "http imported: False" in out
    assert "refused: module.router needs bounded_agents.http imported: use " in out
    assert "bounded_agents.http.build_router(module)" in out


def test_the_documented_import_serves_the_deprecated_router() -> None:
    """`from bounded_agents import AgentModule`, as the README had it with `module.router`."""
    out = _run("from bounded_agents import AgentModule")
    assert "routes: " in out and "refused" not in out
