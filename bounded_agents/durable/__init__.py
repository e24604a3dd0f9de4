"""Durable runtimes: `SqlJournal` (the embedded default) and `InlineRuntime` (no journal)."""

from bounded_agents.durable.context import InlineContext, JournaledContext
from bounded_agents.durable.inline import InlineRuntime
from bounded_agents.durable.journal import SqlJournal

__all__ = ["InlineContext", "InlineRuntime", "JournaledContext", "SqlJournal"]
