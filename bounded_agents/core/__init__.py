"""The core: the turn, its contract types and its ports, free of any framework.

No module under `core/` imports a web, database, HTTP-client or telemetry library
(`tests/test_architecture.py` reads every import); the store, the runtimes and the providers
implement the ports in `core.ports` from the layer above. Its modules are imported by name
(`bounded_agents.core.ports`, `bounded_agents.core.history`, ...): the package itself exports
nothing.
"""

__all__: list[str] = []
