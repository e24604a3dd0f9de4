"""`/v1/conversations`: a conversation is a thread, its items the transcript's messages.

An actor sees only its own conversations (404 otherwise), as on the native thread routes; the
items are paged from the same transcript read as `GET /threads/{id}/messages`, so both APIs list
one history.
"""

from __future__ import annotations

import time
from typing import Annotated, Final, Literal

from fastapi import Body, Path, Query

from bounded_agents.actors import Actor
from bounded_agents.core.messages import MAX_SEQ, Message, unstorable_title
from bounded_agents.core.ports import Thread
from bounded_agents.errors import ThreadNotFound, clipped, echoed
from bounded_agents.http.deps import ActorDep, ModuleDep, canonical_uuid
from bounded_agents.http.openai.errors import (
    InvalidParameter,
    UnstorableParameter,
    UnsupportedParameter,
)
from bounded_agents.http.openai.items import item_position, message_items
from bounded_agents.http.openai.schemas import (
    ConversationOut,
    CreateConversationIn,
    Item,
    ItemsPage,
)
from bounded_agents.http.router import transcript_page
from bounded_agents.module import AgentModule

TITLE_MAX_CHARS: Final = 500

ConversationIdPath = Annotated[str, Path(description="The conversation's (thread's) id.")]


async def create_conversation(
    actor: ActorDep,
    module: ModuleDep,
    body: Annotated[CreateConversationIn | None, Body()] = None,
) -> ConversationOut:
    body = body or CreateConversationIn()
    if body.items:
        raise UnsupportedParameter(
            "items", "a conversation starts empty: send its first message with responses.create"
        )
    metadata = dict(body.metadata or {})
    agent = metadata.pop("agent", None) or body.model or _only_agent(module)
    title = metadata.pop("title", None)
    if metadata:
        raise UnsupportedParameter(
            f"metadata.{clipped(sorted(metadata)[0])}", "only `agent` and `title` metadata are kept"
        )
    if title is not None and len(title) > TITLE_MAX_CHARS:
        raise InvalidParameter("metadata.title", f"at most {TITLE_MAX_CHARS} characters")
    unstorable = None if title is None else unstorable_title(title)
    if unstorable is not None:  # named here: the store's `invalid_content` would name `input`
        raise UnstorableParameter("metadata.title", unstorable)
    definition = module.loop.definition(agent)
    thread = await module.store.create_thread(actor_id=actor.id, agent=definition.name, title=title)
    return _conversation(thread)


def _only_agent(module: AgentModule) -> str:
    if len(module.loop.agents) == 1:
        return next(iter(module.loop.agents))
    raise InvalidParameter(
        "metadata.agent",
        f"name the agent in metadata['agent'], one of {sorted(module.loop.agents)}",
    )


async def get_conversation(
    conversation_id: ConversationIdPath, actor: ActorDep, module: ModuleDep
) -> ConversationOut:
    return _conversation(await owned_thread(module, conversation_id, actor))


def _conversation(thread: Thread) -> ConversationOut:
    metadata = {"agent": thread.agent}
    if thread.title is not None:
        metadata["title"] = thread.title
    created = thread.created_at.timestamp() if thread.created_at else time.time()
    return ConversationOut(id=thread.id, created_at=int(created), metadata=metadata)


async def owned_thread(module: AgentModule, thread_id: str, actor: Actor) -> Thread:
    canonical = canonical_uuid(thread_id)
    if canonical is None:
        raise ThreadNotFound(thread_id)
    return await module.loop.owned_thread(canonical, actor.id)


async def list_items(
    conversation_id: ConversationIdPath,
    actor: ActorDep,
    module: ModuleDep,
    limit: Annotated[int, Query(ge=1, le=100, description="Items per page.")] = 20,
    after: Annotated[
        str | None,
        Query(
            description="An item id: list from after it (`msg_<seq>`, `fc_<seq>_<i>`, "
            "`fco_<seq>_<i>`).",
            examples=["msg_12", "fc_12_0", "fco_12_0"],
        ),
    ] = None,
    order: Annotated[Literal["asc", "desc"], Query(description="By position.")] = "desc",
    include: Annotated[list[str] | None, Query(description="Accepted, ignored.")] = None,
) -> ItemsPage:
    """Newest first by default, as OpenAI lists them; `after` continues from an item id."""
    thread = await owned_thread(module, conversation_id, actor)
    cursor = item_position(after) if after is not None else None
    if after is not None and cursor is None:
        raise InvalidParameter("after", f"{echoed(after)} is not an item id of this API")
    if order == "desc":
        items = await _items_desc(module, thread.id, limit + 1, cursor)
    else:
        items = await _items_asc(module, thread.id, limit + 1, cursor)
    page = items[:limit]
    return ItemsPage(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=len(items) > limit,
    )


async def _items_desc(
    module: AgentModule, thread_id: str, want: int, cursor: tuple[int, int] | None
) -> list[Item]:
    """Newest first: pages of messages read backwards until `want` items are in hand."""
    out: list[Item] = []
    before = _below(cursor[0] + 1) if cursor is not None else None
    while len(out) < want:
        messages = await transcript_page(module, thread_id, want, before)
        if not messages:
            break
        for message in reversed(messages):
            for position, item in reversed(message_items(message)):
                if cursor is None or position < cursor:
                    out.append(item)
        before = messages[0].seq
        if before is None or before <= 1:
            break
    return out[:want]


async def _items_asc(
    module: AgentModule, thread_id: str, want: int, cursor: tuple[int, int] | None
) -> list[Item]:
    """Oldest first. A thread's seqs run from 1, so the messages from `start` on are the
    newest ones below `start + n`; where a message was erased there is a gap, and a window of
    gap alone goes on from the next stored seq."""
    out: list[Item] = []
    start = cursor[0] if cursor is not None else 1
    while len(out) < want:
        messages: list[Message] = [
            m
            for m in await transcript_page(module, thread_id, want, _below(start + want))
            if (m.seq or 0) >= start
        ]
        if not messages:
            resumed = await _next_stored(module, thread_id, start)
            if resumed is None:
                break
            start = resumed
            continue
        for message in messages:
            for position, item in message_items(message):
                if cursor is None or position > cursor:
                    out.append(item)
        start = (messages[-1].seq or start) + 1
    return out[:want]


async def _next_stored(module: AgentModule, thread_id: str, start: int) -> int | None:
    """The first stored seq from `start` on (one read), or None: past an erased stretch."""
    found = await module.store.messages_after(thread_id, start - 1, 1)
    return found[0].seq if found else None


def _below(seq: int) -> int | None:
    """`seq` as a `before` bound for the store; None (no bound) past `MAX_SEQ`, which every
    stored seq is below: the bound itself would overflow the database's integer."""
    return seq if seq <= MAX_SEQ else None


__all__ = ["create_conversation", "get_conversation", "list_items", "owned_thread"]
