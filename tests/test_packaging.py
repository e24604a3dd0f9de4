"""The wheel carries every package of the library: setuptools is given an explicit list (the
migrations live outside the package tree, under their own package-dir), so a new subpackage
left off that list would install without its modules and fail only on a user's machine.

A directory of data files (templates, static assets) is a package too, to Python and so to
setuptools (a PEP 420 namespace package): one left off the list, its files given as a path
under its parent's package-data, ships, but every build and editable install warns that it
"is absent from the `packages` configuration" (tests/install checks a real build says so)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> Any:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_library_package_is_listed_for_the_wheel() -> None:
    config = _setuptools()
    listed = set(config["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "bounded_agents").rglob("__init__.py")
    }
    assert on_disk - listed == set(), "packages missing from [tool.setuptools] packages"
    assert config["package-dir"]["bounded_agents.migrations"] == "migrations"
    assert {"bounded_agents.migrations", "bounded_agents.migrations.versions"} <= listed


def test_every_directory_of_package_data_is_a_listed_package_with_its_own_patterns() -> None:
    """setuptools' documented way for a data subdirectory: list it as a (namespace) package and
    give its patterns under its own dotted name, not as a path under its parent's."""
    config = _setuptools()
    listed = set(config["packages"])
    package_data: dict[str, list[str]] = config["package-data"]
    with_files = {
        ".".join(directory.relative_to(ROOT).parts)
        for directory in [ROOT / "bounded_agents", *(ROOT / "bounded_agents").rglob("*")]
        if directory.is_dir()
        and directory.name != "__pycache__"
        and not directory.name.startswith(".")
        and any(child.is_file() for child in directory.iterdir())
    }
    assert with_files - listed == set(), "directories of package data missing from packages"
    assert set(package_data) <= listed, "package-data given for a package not listed"
    nested = {f"{pkg}: {p}" for pkg, patterns in package_data.items() for p in patterns if "/" in p}
    assert nested == set(), "package-data patterns reaching into a subdirectory (a package)"
