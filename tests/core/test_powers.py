"""Every optional power is one runtime-checkable protocol with one `supports_<power>` probe,
listed once in `POWERS` and in the powers module's docstring table."""

import inspect
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


def test_the_docstring_table_names_every_power_and_its_probe() -> None:
    doc = powers.__doc__ or ""
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
