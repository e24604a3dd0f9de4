"""The turn pipeline: one module per phase of `AgentLoop`'s run (docs/architecture.md)."""

__all__: list[str] = []
