"""The turn asks the store and the ledger what they can do in one place each: the adapters
`core/turn/store.py` (`TurnStore`) and `core/turn/ledger.py` (`TurnLedger`).

What is checked, from the source's syntax tree, in `core/loop.py` and every module of
`core/turn/` but those two:

- no call to a function whose name starts with `supports_` (or `ledger_supports_`) takes the
  store or the ledger as its first argument (`store`, `self.store`, `ledger`, `self.ledger`,
  or any other name or attribute ending in `store` or `ledger`);
- no call goes through the raw store behind the adapter (`deps.store.store.<method>(...)`;
  `deps.store` is the `TurnStore`): a phase reads and writes through `deps.store`, the
  `TurnStore`, so there is one read path and one write path.

A probe of the model, the runtime, a durable context or a policy is not the store's and is
left alone. A probe reached by another spelling (an alias, a lambda) would not be seen: this is
a guard against the old shape coming back, not a proof.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "bounded_agents" / "core"
ADAPTERS = {CORE / "turn" / "store.py", CORE / "turn" / "ledger.py"}
PHASES = sorted({CORE / "loop.py", *(CORE / "turn").glob("*.py")} - ADAPTERS)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _is_store_or_ledger(node: ast.expr) -> bool:
    return _dotted(node).endswith(("store", "ledger"))


def _probes_of_the_store_or_ledger(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = _dotted(node.func).rsplit(".", 1)[-1]
        if name.startswith(("supports_", "ledger_supports_")) and _is_store_or_ledger(node.args[0]):
            found.append(f"{path.name}:{node.lineno} {name}({_dotted(node.args[0])})")
    return found


def _calls_through_self_store(path: Path) -> list[str]:
    return [
        f"{path.name}:{node.lineno} {_dotted(node.func)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and ".store.store." in _dotted(node.func)
    ]


def test_the_finder_sees_a_call_through_the_raw_store(tmp_path: Path) -> None:
    phase = tmp_path / "phase.py"
    phase.write_text("async def f(deps):\n    await deps.store.store.get_thread('t')\n")
    assert _calls_through_self_store(phase) == ["phase.py:2 deps.store.store.get_thread"]


def test_the_adapters_are_where_the_store_and_ledger_probes_are() -> None:
    """The finder sees the probes where they are: were it blind, the tests below would pass
    for nothing."""
    assert len(_probes_of_the_store_or_ledger(CORE / "turn" / "store.py")) >= 5
    assert len(_probes_of_the_store_or_ledger(CORE / "turn" / "ledger.py")) == 3


def test_no_phase_of_the_turn_probes_the_store_or_the_ledger_itself() -> None:
    assert CORE / "loop.py" in PHASES and len(PHASES) > 10
    assert [p for path in PHASES for p in _probes_of_the_store_or_ledger(path)] == []


def test_no_phase_of_the_turn_calls_the_store_but_through_its_turn_store() -> None:
    assert [c for path in PHASES for c in _calls_through_self_store(path)] == []
