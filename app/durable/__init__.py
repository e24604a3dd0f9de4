"""Durable runtimes: `SqlJournal` (the embedded default) and `InlineRuntime` (no journal)."""

from app.durable.context import InlineContext, JournaledContext
from app.durable.inline import InlineRuntime
from app.durable.journal import SqlJournal

__all__ = ["InlineContext", "InlineRuntime", "JournaledContext", "SqlJournal"]
