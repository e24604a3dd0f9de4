"""A Pydantic AI message store whose history is the project's bounded SQL thread.

    history = BoundedMessageStore(store)
    messages = await history.load("user-42")
    result = await agent.run("What changed?", message_history=messages)
    await history.save(result.new_messages(), conversation_id="user-42")

Pydantic AI leaves persistence to its caller: `message_history=` in, `new_messages()` out.
`load` gives the BOUNDED history (the thread's summary first, as a system prompt, then its newest
`keep_runs` runs whole, at most `max_items` items, read in one range scan); `save` appends a run's
new messages, once: each message is keyed by its own run's id (Pydantic AI's `run_id`) and its
JSON, so saving the same run twice, or with another run, stores it once. Messages are
serialized with Pydantic AI's own `ModelMessagesTypeAdapter` and come back exactly as they were.
`history_processor` bounds a long run's history in flight the same way (cut at runs, the summary
kept first).

Importing this module imports `pydantic_ai` (`pip install "bounded-agents[pydantic-ai]"`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from bounded_agents.core.ports import AgentStore, Summarizer
from bounded_agents.errors import InvalidInput
from bounded_agents.integrations.folds import FoldOutcome
from bounded_agents.integrations.items import NO_LINKS, Links, Projection, item_json, label
from bounded_agents.integrations.thread import (
    DEFAULT_FOLD_ITEMS,
    DEFAULT_KEEP_RUNS,
    DEFAULT_MAX_ITEMS,
    BoundedView,
    Entry,
    ThreadHistory,
)

THREADS_KEPT = 1024
"""Conversations a `BoundedMessageStore` remembers having created (see `thread`)."""

_NAMESPACE = uuid.UUID("0f3c7a52-58a4-4ec4-8f0e-2c7e93a1d6b4")


def _prompt_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(c for c in content if isinstance(c, str))


def starts_run(message: ModelMessage) -> bool:
    """A request carrying the user's prompt starts a run; tool returns and retries do not."""
    return isinstance(message, ModelRequest) and any(
        isinstance(p, UserPromptPart) for p in message.parts
    )


def item_links(item: Any) -> Links:
    """How a stored message (its JSON) ties to its neighbours (`ThreadHistory.links`): a
    response opens its tool calls' ids, a request closes those its tool returns (and retries
    of a tool) answer; a provider refuses a tool result whose call it was not sent."""
    parts = item.get("parts") if isinstance(item, dict) else None
    if not isinstance(parts, list):
        return NO_LINKS
    parts = [p for p in parts if isinstance(p, dict)]
    if item.get("kind") == "response":
        return Links(opens=_call_ids(p for p in parts if p.get("part_kind") == "tool-call"))
    if any(p.get("part_kind") == "user-prompt" for p in parts):
        # A run's start closes nothing for the view: a return it holds (of a paused call
        # resumed with the next prompt) is sent as text when its call is not in the view
        # (`returns_as_text`). Found by attack: the view skipped the request, prompt and all.
        return NO_LINKS
    answers = (
        p
        for p in parts
        if p.get("part_kind") == "tool-return"
        or (p.get("part_kind") == "retry-prompt" and p.get("tool_name"))
    )
    return Links(closes=_call_ids(answers))


def _call_ids(parts: Iterable[dict[str, Any]]) -> frozenset[str]:
    return frozenset(str(p.get("tool_call_id") or "") for p in parts)


def project_message(message: Any, index: int) -> Projection:
    """What the store indexes of one message; refuses what is no `ModelMessage`, naming it."""
    if isinstance(message, ModelRequest):
        lines: list[str] = []
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                lines.append(_prompt_text(part.content))
            elif isinstance(part, (ToolReturnPart, RetryPromptPart)):
                lines.append(_answer_text(part))
        return Projection("user" if starts_run(message) else "assistant", "\n".join(lines))
    if isinstance(message, ModelResponse):
        lines = []
        for rpart in message.parts:
            if isinstance(rpart, TextPart):
                lines.append(rpart.content)
            elif isinstance(rpart, ToolCallPart):
                lines.append(f"[tool call {rpart.tool_name}] {rpart.args_as_json_str()}")
        return Projection("assistant", "\n".join(lines))
    raise InvalidInput(f"{label(message, index)} is not a ModelRequest or ModelResponse")


def _answer_text(part: ToolReturnPart | RetryPromptPart) -> str:
    if isinstance(part, ToolReturnPart):
        return f"[tool output {part.tool_name}] {part.model_response_str()}"
    return f"[retry] {part.model_response()}"


def _call_before(messages: list[ModelMessage], cut: int) -> int:
    """`cut`, moved back to the oldest response making a call that the request at `cut`
    answers, when such calls precede it (a run resumed with `deferred_tool_results` and a new
    prompt; found by review, a request answering calls of two responses kept only the newer)."""
    request = messages[cut]
    wanted = {
        p.tool_call_id for p in request.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))
    }
    for i in range(cut - 1, -1, -1):
        if not wanted:
            break
        made = messages[i]
        if isinstance(made, ModelResponse):
            calls = {p.tool_call_id for p in made.parts if isinstance(p, ToolCallPart)}
            if calls & wanted:
                wanted -= calls
                cut = i
    return cut


def returns_as_text(messages: list[ModelMessage]) -> list[ModelMessage]:
    """`messages` with every tool return (or tool retry) whose call is not among them turned
    into a user-prompt part of the same text, in its place: a provider refuses a return whose
    call it was not sent, and dropping it would lose what the tool said.

    A bounded view never begins on a return alone (`items.view_start`), but Pydantic AI builds
    ONE request holding the return of a call it paused on (`deferred_tool_results`) AND the
    user's next prompt, and that request starts a run: found by review, the view of the newest
    run began on it and left its call, in the run before, out."""
    calls: set[str] = set()
    kept: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            calls.update(p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart))
            kept.append(message)
            continue
        parts = [_as_text_if_orphan(p, calls) for p in message.parts]
        kept.append(message if parts == message.parts else replace(message, parts=parts))
    return kept


def _as_text_if_orphan(part: ModelRequestPart, calls: set[str]) -> ModelRequestPart:
    if isinstance(part, RetryPromptPart) and part.tool_name is None:
        return part  # a retry of the output, answering no call
    if isinstance(part, RetryPromptPart) and part.tool_call_id not in calls:
        return UserPromptPart(_answer_text(part), timestamp=part.timestamp)
    if isinstance(part, ToolReturnPart) and part.tool_call_id not in calls:
        # The tool's files and images too (found by review: the text alone lost them), and
        # its time, so two loads of one history are equal.
        text, files = part.model_response_str_and_user_content()
        content = [f"[tool output {part.tool_name}] {text}", *files]
        return UserPromptPart(content, timestamp=part.timestamp)
    return part


def _projected(message: Any, index: int) -> Projection:
    """`project_message`, a message Pydantic AI itself cannot serialize (a tool call's
    arguments nested past its serializer's depth: found by attack, it raised
    PydanticSerializationError raw) refused in one line as `_dumped` refuses it."""
    try:
        return project_message(message, index)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{label(message, index)} cannot be serialized: {exc}") from None


def _dumped(message: ModelMessage, index: int) -> str:
    try:
        data = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"{label(message, index)} cannot be serialized: {exc}") from None
    return item_json(data, label=label(message, index))


def _loaded(entries: Sequence[Entry]) -> list[ModelMessage]:
    """The stored messages back in Pydantic AI's types; a row no adapter wrote becomes a plain
    request or response with its text."""
    raw: list[Any] = []
    for e in entries:
        if e.item is not None:
            raw.append(e.item)
        elif e.message.role == "user":
            raw.append(
                {
                    "kind": "request",
                    "parts": [{"part_kind": "user-prompt", "content": e.message.content}],
                }
            )
        else:
            raw.append(
                {"kind": "response", "parts": [{"part_kind": "text", "content": e.message.content}]}
            )
    return ModelMessagesTypeAdapter.validate_python(raw)


def _lead(opening: Entry | None, view: BoundedView) -> list[ModelMessage]:
    """One request of system prompts ahead of the kept runs: the first request's own (when the
    view no longer holds it), then the summary's; none when there is neither."""
    parts: list[SystemPromptPart] = []
    if opening is not None and opening.item is not None:
        first = _loaded([opening])[0]
        if isinstance(first, ModelRequest):
            parts += [p for p in first.parts if isinstance(p, SystemPromptPart)]
    if view.summary_text is not None:
        parts.append(SystemPromptPart(content=view.summary_text))
    return [ModelRequest(parts=parts)] if parts else []


class BoundedMessageStore:
    """Conversations of Pydantic AI agents kept in `store` (a `SqlAgentStore`).

    `keep_runs` is the bound `load` reads; `summarizer` (`summarize_with_model(provider)`, or
    any `Summarizer`) is what `compact` folds older runs with, every `fold_items` items past
    the kept runs, when `save` is called with `compact=True` or `compact` directly.
    """

    def __init__(
        self,
        store: AgentStore,
        *,
        actor_id: str = "local",
        agent: str = "pydantic-ai",
        keep_runs: int = DEFAULT_KEEP_RUNS,
        summarizer: Summarizer | None = None,
        fold_items: int = DEFAULT_FOLD_ITEMS,
        max_items: int = DEFAULT_MAX_ITEMS,
    ) -> None:
        self.store = store
        self.actor_id = actor_id
        self.agent = agent
        self.keep_runs = keep_runs
        self.max_items = max_items
        self.summarizer = summarizer
        self.fold_items = fold_items
        self.last_rows_read = 0
        """Message rows the last `load` read: the bound, however long the thread."""
        self._threads: dict[str, ThreadHistory] = {}

    def thread(self, conversation_id: str) -> ThreadHistory:
        """The conversation's thread in the store (the shared core), kept for the next call (up
        to `THREADS_KEPT` conversations). Its owner is still checked on every call: the object
        holds no state of the thread's (see `ThreadHistory.check_owner`)."""
        found = self._threads.get(conversation_id)
        if found is None:
            if len(self._threads) >= THREADS_KEPT:
                self._threads.clear()
            found = self._threads[conversation_id] = ThreadHistory(
                self.store,
                conversation_id,
                actor_id=self.actor_id,
                agent=self.agent,
                keep_runs=self.keep_runs,
                max_items=self.max_items,
                links=item_links,
            )
        return found

    async def load(self, conversation_id: str) -> list[ModelMessage]:
        """The bounded history: the agent's system prompts and the summary first (one request
        of system prompts), then the newest runs (at most `max_items` items).

        Pydantic AI adds an agent's `system_prompt` to a run's request only when the history
        is EMPTY, so only the conversation's first request holds it. Once that request has
        left the bounded view, its system prompts are read back (one row) and kept first, as
        `history_processor` keeps them in flight; otherwise every later run would go without
        them (found by attack: from the run after `keep_runs`, the model got none)."""
        thread = self.thread(conversation_id)
        view = await thread.bounded()
        opening = await thread.opening(view)
        self.last_rows_read = view.rows_read + (opening is not None)
        return _lead(opening, view) + returns_as_text(_loaded(view.entries))

    async def save(
        self,
        new_messages: Sequence[ModelMessage],
        *,
        conversation_id: str | None = None,
        compact: bool = False,
    ) -> int:
        """Append a run's `new_messages` in order, each message once (all or none while none
        of them is stored; one by one past those stored otherwise: `_item_keys`); returns how
        many were stored (0 when all were already). The conversation is `conversation_id`,
        else the one the messages carry (Pydantic AI sets it on every message of a run)."""
        if not new_messages:
            return 0
        cid = conversation_id or next(
            (m.conversation_id for m in new_messages if getattr(m, "conversation_id", None)),
            None,
        )
        if cid is None:
            raise InvalidInput("save needs a conversation_id: the messages carry none")
        batch = [(_projected(m, i), _dumped(m, i)) for i, m in enumerate(new_messages)]
        thread = self.thread(cid)
        keys = _item_keys(new_messages, [text for _, text in batch])
        stored = len(await thread.append(batch, keys=keys))
        if compact and self.summarizer is not None:
            await thread.compact_if_due(self.summarizer, fold_items=self.fold_items)
        return stored

    async def compact(self, conversation_id: str) -> FoldOutcome | None:
        """Fold every unsummarized run older than the kept ones into the summary now."""
        if self.summarizer is None:
            return None
        return await self.thread(conversation_id).compact(self.summarizer)

    async def pop(self, conversation_id: str) -> ModelMessage | None:
        """Erase the newest message (and the summaries covering it) and return it."""
        entry = await self.thread(conversation_id).pop()
        return None if entry is None else _loaded([entry])[0]

    async def clear(self, conversation_id: str) -> None:
        """Erase the conversation: messages, summaries, search index."""
        await self.thread(conversation_id).clear()


def _item_keys(messages: Sequence[ModelMessage], texts: Sequence[str]) -> list[str]:
    """Each message's idempotency key: a UUID5 of Pydantic AI's run id and the message's own
    JSON, so each message of a run is stored once whatever batches it is saved in
    (`ThreadHistory.append`'s `keys`): a retried save, a run saved in parts (after each node
    of `agent.iter`), a part retried with the next, the whole run after its parts, and all of
    them at once. Keyed by the run id alone, a run saved in parts lost every part after the
    second that began with a message of the same role, silently (found by attack: its tool
    return and answer were never stored, and `load` ended on a tool call with no return);
    keyed by each batch's first message, overlapping saves made at once stored messages twice
    (found by a later attack).

    The run id is each message's OWN (Pydantic AI sets it on every message of a run): found
    by attack, keyed by the batch's first run id, two runs saved in one batch
    (`r1.new_messages() + r2.new_messages()`, or `all_messages()`) keyed the second run's
    messages under the first's id, and a retried save of the second run stored them again. A
    message without one takes the batch's first run id (none: the JSON alone), as every
    message did before, so a batch of one run keeps the keys it had: messages stored before
    are not stored again by a retry."""
    batch_run = next((m.run_id for m in messages if getattr(m, "run_id", None)), None)
    return [
        str(uuid.uuid5(_NAMESPACE, f"{getattr(m, 'run_id', None) or batch_run or ''}\x1f{text}"))
        for m, text in zip(messages, texts, strict=True)
    ]


def history_processor(
    keep_runs: int = DEFAULT_KEEP_RUNS,
) -> Callable[[list[ModelMessage]], list[ModelMessage]]:
    """A Pydantic AI history processor that keeps a leading summary (a request of system
    prompts only) and the newest `keep_runs` runs, whole: the run in flight is never cut, nor
    a tool call from its return. Give it to an agent as
    `Agent(capabilities=[ProcessHistory(history_processor(n))])`."""

    def bound(messages: list[ModelMessage]) -> list[ModelMessage]:
        starts = [i for i, m in enumerate(messages) if starts_run(m)]
        if len(starts) <= keep_runs:
            return messages
        # A run resumed with a paused call's return and the next prompt begins in the run
        # before: the response making that call is kept too. Not `returns_as_text`: Pydantic
        # AI stores what its processors return, and found by review, the converted request
        # replaced the tool's return in `new_messages()`.
        cut = _call_before(messages, starts[-keep_runs])
        first = messages[0]
        if not isinstance(first, ModelRequest) or cut == 0:
            return messages[cut:]
        system = [p for p in first.parts if isinstance(p, SystemPromptPart)]
        if not system:
            return messages[cut:]
        # The system prompts (the summary among them) stay first. In a run Pydantic AI has
        # merged them into the oldest run's request: that request is cut, they are not.
        lead = first if len(system) == len(first.parts) else ModelRequest(parts=system)
        return [lead, *messages[cut:]]

    return bound


__all__ = [
    "THREADS_KEPT",
    "BoundedMessageStore",
    "history_processor",
    "item_links",
    "project_message",
    "returns_as_text",
    "starts_run",
]
