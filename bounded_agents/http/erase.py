"""Erasure routes (the right to erasure): a message or a whole thread, gone for good.

    DELETE /threads/{thread_id}                  204: the thread and all of it (ledger aside)
    DELETE /threads/{thread_id}/messages/{seq}   204: the message, and every summary made of it

Owner only: another actor's thread, an unknown thread and an unknown seq are all 404, as every
thread route answers. While a turn runs on the thread the erasure is refused with 409
`thread_busy` (the turn could be writing a summary of that very message): retry when it ends.
What exactly is erased, and why so, is `bounded_agents.store.erase`'s docstring.

Its own router (`build_erase_router`), included by the module's router: the OpenAI-shaped
deletes (`bounded_agents.http.openai_erase`) share `erase_message` and `erase_thread`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Response

from bounded_agents.core.messages import MAX_SEQ
from bounded_agents.core.ports import ErasingStore, supports_erasure, supports_run_erasure
from bounded_agents.errors import AgentError, NotFound, echoed
from bounded_agents.http.deps import DIGITS_ONLY, ModuleDep, OwnedThreadDep
from bounded_agents.http.route import agent_route_class
from bounded_agents.http.schemas import ErrorOut

if TYPE_CHECKING:
    from bounded_agents.module import AgentModule


class MessageNotFound(NotFound):
    """No message with that seq in the thread (never stored, or erased already): 404."""

    code = "message_not_found"

    def __init__(self, thread_id: str, seq: int) -> None:
        super().__init__(f"thread {echoed(thread_id)} has no message {seq}")
        self.thread_id = thread_id
        self.seq = seq


class ErasureUnsupported(AgentError):
    """The module's store cannot erase (it lacks `ErasingStore`): the method is not allowed."""

    code = "method_not_allowed"

    def __init__(self) -> None:
        super().__init__("this server's store cannot erase messages or threads")


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


def erasing_store(module: AgentModule) -> ErasingStore:
    store = module.store
    if not supports_erasure(store):
        raise ErasureUnsupported()
    return store


async def erase_thread(module: AgentModule, thread_id: str) -> None:
    """Erase an owned thread (the caller checked the owner). A thread gone between that check
    and now was erased by a concurrent request: the outcome asked for, so no error."""
    store = erasing_store(module)
    held = await _runs_held_elsewhere(module, thread_id)
    await store.delete_thread(thread_id)
    await _erase_runs(module, held)


async def erase_message(module: AgentModule, thread_id: str, seq: int) -> None:
    """Erase a message of an owned thread; `MessageNotFound` when it has none at `seq`."""
    store = erasing_store(module)
    held = await _runs_held_elsewhere(module, thread_id)
    if not await store.delete_message(thread_id, seq):
        raise MessageNotFound(thread_id, seq)
    await _erase_runs(module, held)


async def _runs_held_elsewhere(module: AgentModule, thread_id: str) -> list[str]:
    """The thread's runs a runtime keeps records of outside the store (DBOS's workflows), read
    before the store's erasure deletes the `runs` rows that name them. The store erases every
    run's journal of the thread (`bounded_agents.store.erase`), so all of them go there too;
    a run begun in between would be live, and the store refuses the erasure then."""
    runtime = module.loop.runtime
    return await runtime.thread_run_ids(thread_id) if supports_run_erasure(runtime) else []


async def _erase_runs(module: AgentModule, run_ids: list[str]) -> None:
    """After the store's erasure committed (a refused one, `ThreadBusy`, reaches no runtime)."""
    runtime = module.loop.runtime
    if run_ids and supports_run_erasure(runtime):
        await runtime.erase_runs(run_ids)


async def delete_thread(thread: OwnedThreadDep, module: ModuleDep) -> Response:
    await erase_thread(module, thread.id)
    return Response(status_code=204)


async def delete_message(thread: OwnedThreadDep, seq: SeqPath, module: ModuleDep) -> Response:
    await erase_message(module, thread.id, seq)
    return Response(status_code=204)


__all__ = ["ErasureUnsupported", "MessageNotFound", "build_erase_router"]
