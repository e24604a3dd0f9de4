"""Print pip constraints that pin every runtime dependency to its declared lower bound.

`make test-lowest` installs the project with them, so the bounds in pyproject.toml are tested,
not guessed. A runtime dependency without a `>=` bound is an error: its lowest version would be
whatever pip happens to pick. Development tools are left to resolve as usual.

Extras named on the command line (`lowest_constraints.py dbos`) are pinned to their bounds too;
a package bounded twice (by the core and by an extra) is pinned to the higher bound, the lowest
version that satisfies both.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
LOWER = re.compile(r">=\s*([0-9][^,;\s]*)")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def lowest_pins(pyproject: Path, extras: list[str] | None = None) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    dependencies = list(project["dependencies"])
    for extra in extras or []:
        dependencies += project["optional-dependencies"][extra]
    pins: dict[str, str] = {}
    for requirement in dependencies:
        match = REQUIREMENT.match(requirement)
        bound = LOWER.search(match.group(3)) if match else None
        if match is None or bound is None:
            raise SystemExit(f"runtime dependency without a '>=' lower bound: {requirement!r}")
        name = match.group(1).lower()
        if name not in pins or _version(bound.group(1)) > _version(pins[name]):
            pins[name] = bound.group(1)
    return [f"{name}=={version}" for name, version in pins.items()]


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    pins = lowest_pins(root / "pyproject.toml", sys.argv[1:])
    sys.stdout.write("".join(f"{pin}\n" for pin in pins))
