"""The wheel carries every package of the library: setuptools is given an explicit list (the
migrations live outside the package tree, under their own package-dir), so a new subpackage
left off that list would install without its modules and fail only on a user's machine."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_library_package_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "bounded_agents").rglob("__init__.py")
    }
    assert on_disk - listed == set(), "packages missing from [tool.setuptools] packages"
    assert config["package-dir"]["bounded_agents.migrations"] == "migrations"
    assert {"bounded_agents.migrations", "bounded_agents.migrations.versions"} <= listed
