"""Print pip constraints that pin every runtime dependency to its declared lower bound.

`make test-lowest` installs the project with them, so the bounds in pyproject.toml are tested,
not guessed. A runtime dependency without a `>=` bound is an error: its lowest version would be
whatever pip happens to pick. Development tools are left to resolve as usual.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
LOWER = re.compile(r">=\s*([0-9][^,;\s]*)")


def lowest_pins(pyproject: Path) -> list[str]:
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = []
    for requirement in dependencies:
        match = REQUIREMENT.match(requirement)
        bound = LOWER.search(match.group(3)) if match else None
        if match is None or bound is None:
            raise SystemExit(f"runtime dependency without a '>=' lower bound: {requirement!r}")
        pins.append(f"{match.group(1)}=={bound.group(1)}")
    return pins


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    sys.stdout.write("".join(f"{pin}\n" for pin in lowest_pins(root / "pyproject.toml")))
