"""The frameworks are optional: the plain install imports none of them."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("agents", "pydantic_ai", "langchain", "langchain_core")


def test_importing_the_package_and_the_shared_core_imports_no_framework() -> None:
    script = (
        "import sys, bounded_agents, bounded_agents.integrations, bounded_agents.store\n"
        "from bounded_agents.integrations import ThreadHistory\n"
        f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_each_adapter_imports_its_framework_only() -> None:
    for module, framework in (
        ("openai_agents", "agents"),
        ("pydantic_ai", "pydantic_ai"),
        ("langchain", "langchain_core"),
    ):
        script = (
            f"import sys, bounded_agents.integrations.{module}\n"
            f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))\n"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert framework in done.stdout, (module, done.stdout)
        others = {"agents", "pydantic_ai", "langchain_core"} - {framework}
        assert not any(f"'{o}'" in done.stdout for o in others), (module, done.stdout)
