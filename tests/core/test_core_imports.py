"""bounded_agents.core must stay framework-free: importing it pulls in neither FastAPI nor
SQLAlchemy."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
import bounded_agents.core.history, bounded_agents.core.summary, bounded_agents.core.context_window
import bounded_agents.core.messages, bounded_agents.core.ports, bounded_agents.core.tokens
leaked = sorted(m for m in ("fastapi", "sqlalchemy") if m in sys.modules)
print(",".join(leaked))
"""


def test_core_imports_no_framework_in_a_fresh_interpreter() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"bounded_agents.core imported {proc.stdout.strip()}"
