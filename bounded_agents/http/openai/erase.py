"""The Conversations API's deletes, over the module's erasure (`AgentModule.erase_thread`,
`AgentModule.erase_message`, as the native routes of `bounded_agents.http.erase`):

    DELETE /v1/conversations/{conversation_id}                  ConversationDeletedOut
    DELETE /v1/conversations/{conversation_id}/items/{item_id}  ConversationOut

As OpenAI defines them: the conversation delete answers `{id, object: "conversation.deleted",
deleted: true}`, the item delete the conversation. An item id names a position in a stored
message (`msg_<seq>`, `fc_<seq>_<i>`, `fco_<seq>_<i>`: `bounded_agents.http.openai.items`), and
what is erased is that whole message: a tool call's item and its result live in the assistant
message that made them, and erasure errs on the side of erasing more, never less (the id must
still be one of that message's items). An id of no
message (foreign, erased already, past `MAX_SEQ`) is 404, as is another actor's conversation.

Its own router, without the `/v1` prefix: `build_openai_router` includes it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel

from bounded_agents.errors import MessageNotFound, NotFound, echoed
from bounded_agents.http.deps import ActorDep, ModuleDep
from bounded_agents.http.openai.conversations import ConversationIdPath, owned_thread
from bounded_agents.http.openai.errors import openai_error_response
from bounded_agents.http.openai.items import item_position, message_items
from bounded_agents.http.openai.schemas import ConversationOut, OpenAIErrorOut
from bounded_agents.http.route import agent_route_class
from bounded_agents.http.router import transcript_page

if TYPE_CHECKING:
    from bounded_agents.module import AgentModule


class ItemNotFound(NotFound):
    """No stored message holds the item (a foreign id, or erased already): 404."""

    code = "item_not_found"
    param: ClassVar[str] = "item_id"

    def __init__(self, item_id: str) -> None:
        super().__init__(f"item {echoed(item_id)} not found in this conversation")
        self.item_id = item_id


class ConversationDeletedOut(BaseModel):
    """OpenAI's `ConversationDeletedResource`."""

    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


ItemIdPath = Annotated[str, Path(description="An item id: `msg_<seq>`, `fc_<seq>_<i>`...")]

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": OpenAIErrorOut} for s in (400, 401, 404, 405, 409, 500, 503)
}


def build_openai_erase_router(module: AgentModule) -> APIRouter:
    """The two deletes, their errors in the `/v1` shape."""
    router = APIRouter(route_class=agent_route_class(module, openai_error_response))
    router.add_api_route(
        "/conversations/{conversation_id}",
        delete_conversation,
        methods=["DELETE"],
        response_model=ConversationDeletedOut,
        responses=_ERRORS,
        summary="Delete a conversation (erase its thread)",
    )
    router.add_api_route(
        "/conversations/{conversation_id}/items/{item_id}",
        delete_item,
        methods=["DELETE"],
        response_model=ConversationOut,
        responses=_ERRORS,
        summary="Delete an item (erase the message that holds it)",
    )
    return router


async def delete_conversation(
    conversation_id: ConversationIdPath, actor: ActorDep, module: ModuleDep
) -> ConversationDeletedOut:
    thread = await owned_thread(module, conversation_id, actor)
    await module.erase_thread(thread.id, actor_id=actor.id, thread=thread)
    return ConversationDeletedOut(id=thread.id)


async def delete_item(
    conversation_id: ConversationIdPath, item_id: ItemIdPath, actor: ActorDep, module: ModuleDep
) -> ConversationOut:
    thread = await owned_thread(module, conversation_id, actor)
    seq = await _seq_of_item(module, thread.id, item_id)
    try:
        await module.erase_message(thread.id, seq, actor_id=actor.id, thread=thread)
    except MessageNotFound as exc:
        raise ItemNotFound(item_id) from exc
    metadata = {"agent": thread.agent}
    if thread.title is not None:
        metadata["title"] = thread.title
    created = thread.created_at.timestamp() if thread.created_at else time.time()
    return ConversationOut(id=thread.id, created_at=int(created), metadata=metadata)


async def _seq_of_item(module: AgentModule, thread_id: str, item_id: str) -> int:
    """The seq of the stored message that lists `item_id` among its items; `ItemNotFound`
    for an id of no item there (`fc_5_0` of a message that called no tool included)."""
    position = item_position(item_id)
    if position is None or position[0] < 1:
        raise ItemNotFound(item_id)
    seq = position[0]
    found = await transcript_page(module, thread_id, 1, seq + 1)
    if not found or found[0].seq != seq:
        raise ItemNotFound(item_id)
    if all(item.id != item_id for _, item in message_items(found[0])):
        raise ItemNotFound(item_id)
    return seq


__all__ = ["ConversationDeletedOut", "ItemNotFound", "build_openai_erase_router"]
