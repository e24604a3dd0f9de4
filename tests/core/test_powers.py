"""Every optional power is one runtime-checkable protocol with one `supports_<power>` probe,
listed once in `POWERS` and in docs/architecture.md's table of optional powers; what every
store and ledger has is their base contract, not a power."""

import inspect
from pathlib import Path
from typing import Protocol

from bounded_agents.core import ports
from bounded_agents.core.ports import POWERS, powers, runtime_powers


def _power_protocols() -> set[type]:
    """The protocols defined in the two powers modules (the model's and store's, and the
    runtime's, context's and ledger's)."""
    return {
        obj
        for module in (powers, runtime_powers)
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if obj.__module__ == module.__name__ and Protocol in obj.__mro__[1:]
    }


def test_every_protocol_in_the_powers_module_is_listed_in_powers() -> None:
    assert {p.protocol for p in POWERS} == _power_protocols()


def test_every_power_is_runtime_checkable_and_probed_by_a_supports_function() -> None:
    for power in POWERS:
        assert getattr(power.protocol, "_is_runtime_protocol", False), power.protocol
        assert power.probe.__name__.startswith("supports_"), power.probe
        assert power.probe(object()) is False


ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _table_rows() -> list[str]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Optional powers", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def test_the_docs_table_names_every_power_and_its_probe_and_nothing_else() -> None:
    rows = _table_rows()[1:]  # the header aside
    assert len(rows) == len(POWERS)
    doc = "\n".join(rows)
    for power in POWERS:
        row = f"| {power.protocol.__name__} "
        assert any(
            row in line and power.probe.__name__ in line and line.startswith(f"| {power.on}")
            for line in doc.splitlines()
        ), power.protocol.__name__


def test_the_ports_package_re_exports_every_power_and_its_probe() -> None:
    for power in POWERS:
        assert getattr(ports, power.protocol.__name__) is power.protocol
        assert getattr(ports, power.probe.__name__) is power.probe


def test_what_every_store_and_ledger_has_is_their_base_contract_not_a_power() -> None:
    base = {
        "ThreadInfoReader",
        "PromptDigestStore",
        "SummaryStore",
        "RunMessagesReader",
        "NamedThreadCreator",
        "ThreadLister",
        "TranscriptReader",
        "ErasingStore",
    }
    assert {c.__name__ for c in ports.AgentStore.__mro__} >= base
    assert ports.QuotaReserver in ports.Ledger.__mro__
    assert {p.protocol.__name__ for p in POWERS} & (base | {"QuotaReserver"}) == set()
