"""An OpenAI Agents SDK `Session` whose history is the project's bounded SQL thread.

    session = BoundedSession("user-42", store)
    await Runner.run(agent, "What changed?", session=session)

The runner calls `get_items()` with no limit before every run: this session answers with the
BOUNDED view (the thread's summary as a leading developer item, then its newest `keep_runs` runs,
whole, at most `max_items` items), read in one range scan, so a turn costs the same at item 100 and
100,000, and a tool call is never cut from its output (`item_links`). `get_items(n)` keeps the
protocol's meaning, the raw newest n items (the runner's retry path compares them with what it
wrote). Items are stored
verbatim: every item type comes back exactly as it was added, one this module does not know
included. `pop_item` and `clear_session` go through the store's erasure (summaries and search
index included). `run_compaction` folds older runs into the summary with the summarizer given
(`summarize_with_model(provider)`, or any `Summarizer`); without one it does nothing.

Importing this module imports `agents` (`pip install "bounded-agents[openai-agents]"`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from agents.memory.session import OpenAIResponsesCompactionArgs
from agents.memory.session_settings import SessionSettings

from bounded_agents.core.ports import AgentStore, Summarizer
from bounded_agents.errors import InvalidInput
from bounded_agents.integrations.folds import FoldOutcome
from bounded_agents.integrations.items import NO_LINKS, Links, Projection, item_json, label
from bounded_agents.integrations.thread import (
    DEFAULT_FOLD_ITEMS,
    DEFAULT_KEEP_RUNS,
    DEFAULT_MAX_ITEMS,
    Entry,
    ThreadHistory,
)

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper

_ASSISTANT_TYPES = ("function_call", "function_call_output", "reasoning")


def _text_of(content: Any) -> str:
    """The plain text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, Mapping):
            for key in ("text", "refusal", "transcript"):
                value = part.get(key)
                if isinstance(value, str):
                    parts.append(value)
    return "\n".join(parts)


def _checked(item: Any, index: int) -> tuple[Projection, str]:
    """An item's projection and JSON, its JSON first: an item that is no JSON (an output
    object, arguments nested thousands deep) is refused naming it before the projection
    formats it (which raised `TypeError` or `RecursionError` raw)."""
    if not isinstance(item, Mapping):
        project_item(item, index)  # refuses it, naming it
    text = item_json(item, label=label(item, index))
    return project_item(item, index), text


def project_item(item: Any, index: int) -> Projection:
    """What the store indexes of one SDK item. Only a user message starts a run; every other
    item (tool calls and outputs, reasoning, handoffs, an unknown type) belongs to the run in
    flight. Refuses, naming the item, what is no input item at all."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{label(item, index)} is not an input item (a dict)")
    kind = item.get("type")
    if kind is not None and not isinstance(kind, str):
        raise InvalidInput(f"{label(item, index)} has a non-string type")
    role = item.get("role")
    if kind in (None, "message") and role is not None:
        content = item.get("content")
        if not isinstance(role, str) or not isinstance(content, str | list):
            raise InvalidInput(f"{label(item, index)} is a message without a role and content")
        if role == "user":
            return Projection("user", _text_of(content))
        if role in ("system", "developer"):
            return Projection("system", _text_of(content))
        return Projection("assistant", _text_of(content))
    if kind is None:
        raise InvalidInput(f"{label(item, index)} has neither a type nor a role")
    if kind == "function_call":
        return Projection("assistant", f"[tool call {item.get('name')}] {item.get('arguments')}")
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        return Projection("assistant", f"[tool output] {text}")
    if kind == "reasoning":
        return Projection("assistant", _text_of(item.get("summary") or []))
    # Anything else (handoffs, computer and shell calls, a type newer than this module) is
    # kept verbatim; its projection holds no text, so search and summaries pass it by.
    return Projection("assistant", "")


def item_links(item: Any) -> Links:
    """How an SDK item ties to its neighbours (`ThreadHistory.links`): a `*_call` (or any other
    item with a `call_id`, as `program`) opens its `call_id` and a `*_output` closes it (an
    output with no id closes one no call opens, so no view begins before it), an MCP approval
    request and its response likewise, and a `reasoning` item leads to the call after it: the
    Responses API refuses an output without its call, and a call without its reasoning item."""
    kind = item.get("type") if isinstance(item, Mapping) else None
    if not isinstance(kind, str):
        return NO_LINKS
    if kind == "reasoning":
        return Links(leads=True)
    if kind == "mcp_approval_request":
        return Links(opens=_ids(item.get("id")))
    if kind == "mcp_approval_response":
        return Links(closes=_ids(item.get("approval_request_id")))
    if kind.endswith("_output"):
        return Links(closes=_ids(item.get("call_id")))
    if kind.endswith("_call") or isinstance(item.get("call_id"), str):
        # Any other item with a `call_id` opens it: programmatic tool calling pairs `program`
        # with `program_output` (found by attack: the output was left out of every later view
        # as an answer without a call, and the model lost the program's result).
        return Links(opens=_ids(item.get("call_id")))
    return NO_LINKS


def _ids(value: Any) -> frozenset[str]:
    """A call id as a set; an id that is missing is one no call opens ("")."""
    return frozenset({value if isinstance(value, str) else ""})


def _item_of(entry: Entry) -> list[TResponseInputItem]:
    """The SDK items of one stored row: the verbatim item, or, for a row written outside the
    SDK (the project's own loop, its HTTP API), its messages and tool exchange."""
    if entry.item is not None:
        return [cast("TResponseInputItem", entry.item)]
    m = entry.message
    out: list[dict[str, Any]] = []
    results = {r.call_id: r for r in m.tool_results}
    for call in m.tool_calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        out.append(
            {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments}
        )
        if call.id in results:
            output = results[call.id].content
            out.append({"type": "function_call_output", "call_id": call.id, "output": output})
    if m.content or not out:
        out.append({"type": "message", "role": m.role, "content": m.content})
    return cast("list[TResponseInputItem]", out)


def context_actor(wrapper: RunContextWrapper[Any] | None) -> str | None:
    """The actor a run's context names: its `actor_id` attribute or key, when it is a
    non-empty string; None when there is no context or it names none."""
    if wrapper is None:
        return None
    context = wrapper.context
    if isinstance(context, Mapping):
        actor = context.get("actor_id")
    else:
        actor = getattr(context, "actor_id", None)
    return actor if isinstance(actor, str) and actor else None


class BoundedSession:
    """A `Session` over `store` (a `SqlAgentStore`): one line hands the runner our store.

    `session_id` names the thread with `actor_id`, who owns it (`thread_id_for`: another actor
    naming the same session has a thread of its own), unless the run's context names its own
    actor (`context={"actor_id": ...}` or an object with an `actor_id`), which the runner hands
    every call; `keep_runs` is the bound `get_items()`
    reads; `summarizer` is what `run_compaction` folds with, every `fold_items` items past the
    kept runs (or at once with `force`).
    """

    def __init__(
        self,
        session_id: str,
        store: AgentStore,
        *,
        actor_id: str = "local",
        agent: str = "openai-agents",
        keep_runs: int = DEFAULT_KEEP_RUNS,
        summarizer: Summarizer | None = None,
        fold_items: int = DEFAULT_FOLD_ITEMS,
        max_items: int = DEFAULT_MAX_ITEMS,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings
        self.history = ThreadHistory(
            store,
            session_id,
            actor_id=actor_id,
            agent=agent,
            keep_runs=keep_runs,
            max_items=max_items,
            links=item_links,
            items_lead=True,
        )
        self.summarizer = summarizer
        self.fold_items = fold_items
        self._actors: dict[str, ThreadHistory] = {}
        self.last_rows_read = 0
        """Message rows the last `get_items` read: the bound, however long the thread."""

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """No limit: the bounded view (summary first, then the kept runs). `limit=n`: the raw
        newest n items, oldest first, as the protocol defines it."""
        history = self._history(wrapper)
        if limit is not None:
            entries = await history.newest(limit)
            self.last_rows_read = len(entries)
            return [item for e in entries for item in _item_of(e)]
        view = await history.bounded()
        self.last_rows_read = view.rows_read
        out: list[TResponseInputItem] = []
        if view.summary_text is not None:
            lead = {"type": "message", "role": "developer", "content": view.summary_text}
            out.append(cast("TResponseInputItem", lead))
        for entry in view.entries:
            out.extend(_item_of(entry))
        return out

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append `items` verbatim, in order, all or none: a malformed item is refused naming
        it, before anything is written. Concurrent calls are serialized by the store."""
        batch = [_checked(item, i) for i, item in enumerate(items)]
        await self._history(wrapper).append(batch)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Erase the newest item (and the summaries that cover it) and return it."""
        entry = await self._history(wrapper).pop()
        if entry is None:
            return None
        return _item_of(entry)[-1]

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Erase the thread: items, summaries, search index."""
        await self._history(wrapper).clear()

    async def run_compaction(
        self,
        args: OpenAIResponsesCompactionArgs | None = None,
        *,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> None:
        """Fold older runs into the thread's summary, when due (or at once with `force`).
        The raw items stay: only `get_items()`'s view changes."""
        await self.compact(force=bool(args and args.get("force")), wrapper=wrapper)

    async def compact(
        self, *, force: bool = False, wrapper: RunContextWrapper[Any] | None = None
    ) -> FoldOutcome | None:
        """`run_compaction`'s work, returning what it did (None: nothing was due, or no
        summarizer)."""
        if self.summarizer is None:
            return None
        history = self._history(wrapper)
        if force:
            return await history.compact(self.summarizer)
        return await history.compact_if_due(self.summarizer, fold_items=self.fold_items)

    def _history(self, wrapper: RunContextWrapper[Any] | None) -> ThreadHistory:
        """The thread as the run's actor sees it (the session's own actor by default)."""
        actor = context_actor(wrapper)
        if actor is None or actor == self.history.actor_id:
            return self.history
        found = self._actors.get(actor)
        if found is None:
            if len(self._actors) >= 64:
                self._actors.clear()
            found = self._actors[actor] = ThreadHistory(
                self.history.store,
                self.session_id,
                actor_id=actor,
                agent=self.history.agent,
                keep_runs=self.history.keep_runs,
                max_items=self.history.max_items,
                links=item_links,
                items_lead=True,
            )
        return found


__all__ = ["BoundedSession", "context_actor", "item_links", "project_item"]
