"""Erasure routes (the right to erasure): a message or a whole thread, gone for good.

    DELETE /threads/{thread_id}                  204: the thread and all of it (ledger aside)
    DELETE /threads/{thread_id}/messages/{seq}   204: the message, and every summary made of it

Owner only: another actor's thread, an unknown thread and an unknown seq are all 404, as every
thread route answers. While a turn runs on the thread the erasure is refused with 409
`thread_busy` (the turn could be writing a summary of that very message): retry when it ends.
What exactly is erased, and why so, is `bounded_agents.store.erase`'s docstring.

Its own router (`build_erase_router`), included by the module's router. The erasure itself is
the module's (`AgentModule.erase_thread`, `AgentModule.erase_message`), which the OpenAI-shaped
deletes (`bounded_agents.http.openai.erase`) call too, and so can a library user without HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Response

from bounded_agents.core.messages import MAX_SEQ
from bounded_agents.errors import MessageNotFound
from bounded_agents.http.deps import DIGITS_ONLY, ModuleDep, OwnedThreadDep
from bounded_agents.http.route import agent_route_class
from bounded_agents.http.schemas import ErrorOut

if TYPE_CHECKING:
    from bounded_agents.module import AgentModule


SeqPath = Annotated[
    int,
    DIGITS_ONLY,
    Path(ge=1, le=MAX_SEQ, description="The message's `seq`, as the transcript lists it: digits."),
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (401, 404, 405, 409, 422, 500, 503)
}


def build_erase_router(module: AgentModule) -> APIRouter:
    """The native erasure routes, with the module's route class (its error contract)."""
    router = APIRouter(route_class=agent_route_class(module))
    router.add_api_route(
        "/threads/{thread_id}",
        delete_thread,
        methods=["DELETE"],
        status_code=204,
        response_class=Response,
        responses=_ERRORS,
        summary="Erase a thread: its messages, summaries and journals (its ledger rows stay)",
    )
    router.add_api_route(
        "/threads/{thread_id}/messages/{seq}",
        delete_message,
        methods=["DELETE"],
        status_code=204,
        response_class=Response,
        responses=_ERRORS,
        summary="Erase a message, and every summary that holds it",
    )
    return router


async def delete_thread(thread: OwnedThreadDep, module: ModuleDep) -> Response:
    await module.erase_thread(thread.id, actor_id=thread.actor_id, thread=thread)
    return Response(status_code=204)


async def delete_message(thread: OwnedThreadDep, seq: SeqPath, module: ModuleDep) -> Response:
    await module.erase_message(thread.id, seq, actor_id=thread.actor_id, thread=thread)
    return Response(status_code=204)


__all__ = ["MessageNotFound", "build_erase_router"]
