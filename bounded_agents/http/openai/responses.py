"""`/v1/responses`: a response is a run (same id: `GET /runs/{id}` reports it too).

`responses.create` runs the turn in `conversation`, or in the thread of `previous_response_id`,
or else in a new thread of agent `model`; the agent's bounded history applies as on every other
route, because this calls the same `start_turn` as `POST /agents/{agent}/threads/{id}/messages`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Annotated, Any

from fastapi import Path, Response
from fastapi.responses import JSONResponse

from bounded_agents.actors import Actor
from bounded_agents.core.loop import AgentDefinition
from bounded_agents.core.ports import Idempotency, Thread, supports_erased_reads
from bounded_agents.core.report import RunReport
from bounded_agents.errors import (
    AnswerErased,
    IdempotencyKeyReused,
    QuotaExceeded,
    RunNotFound,
    StoreError,
    ThreadErased,
    ThreadNotFound,
    echoed,
)
from bounded_agents.http.deps import ActorDep, ModuleDep, canonical_uuid
from bounded_agents.http.errors import public_message
from bounded_agents.http.idempotency import IdempotencyKeyHeader, idempotency, keyed_thread_id
from bounded_agents.http.openai.conversations import owned_thread
from bounded_agents.http.openai.errors import (
    InvalidParameter,
    PreviousResponseNotFound,
    UnsupportedParameter,
)
from bounded_agents.http.openai.items import (
    answer_of,
    output_items,
    response_error,
    response_out,
)
from bounded_agents.http.openai.schemas import (
    UNSUPPORTED_PARAMETERS,
    CreateResponseIn,
    InputMessage,
    Item,
    ResponseOut,
)
from bounded_agents.http.openai.stream import ResponseStream
from bounded_agents.http.turns import StartedTurn, check_content, start_turn
from bounded_agents.module import AgentModule
from bounded_agents.outcome import run_messages

ResponseIdPath = Annotated[str, Path(description="The response's (run's) id.")]


async def create_response(
    actor: ActorDep,
    module: ModuleDep,
    body: CreateResponseIn,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Run one turn, as `POST /agents/{agent}/threads/{id}/messages` does. With an
    `Idempotency-Key`, a repeat is answered with the first turn's Response (streamed or not,
    as this request asks: `stream` is not part of what the key must match)."""
    _refuse_unsupported(body)
    content = _input_text(body.input)
    check_content(content, module.settings.max_content_bytes)  # before a thread is made
    keyed = idempotency(
        idempotency_key, "responses", _fingerprinted(body), module.settings.fingerprint_secret()
    )
    thread = await _thread_for(module, actor, body, keyed)
    definition = module.loop.definition(thread.agent)
    run_id = str(uuid.uuid4())
    created_at = time.time()
    try:
        turn = await start_turn(
            module,
            agent=definition.name,
            thread=thread,
            actor_id=actor.id,
            content=content,
            stream=bool(body.stream),
            run_id=run_id,
            idempotency=keyed,
            follows_run=canonical_uuid(body.previous_response_id or "") or None,
        )
        if turn.queue is None or turn.first is None:
            return await _answered(module, turn, run_id, created_at, body, thread, definition)
    except ThreadNotFound:
        # A keyed request's own conversation (`_keyed_thread`), deleted after it was found
        # and before its turn began: the 410 a retry after the deletion gets, not a 404 of a
        # `conversation` the client never named (found by attack: 3 retries of 15 raced one).
        if keyed is not None and body.conversation is None and body.previous_response_id is None:
            if await _erased(module, thread.id):
                raise AnswerErased(None) from None
        raise
    run_id = turn.run_id  # the key's earlier turn's, on a repeat
    created_at = await _run_created_at(module, run_id, created_at)
    start = response_out(
        run_id=run_id,
        agent=definition.name,
        thread_id=thread.id,
        created_at=created_at,
        status="running",
        previous_response_id=body.previous_response_id,
        definition=definition,
    )
    return ResponseStream(
        module=module,
        start=start,
        definition=definition,
        queue=turn.queue,
        task=turn.task,
        first=turn.first,
    ).response()


def _fingerprinted(body: CreateResponseIn) -> dict[str, Any]:
    """What an Idempotency-Key must match: the validated body, but how it asks for its answer
    (`stream`), and with `conversation` as the thread it names. The API takes a conversation
    as an id or as `{"id": ...}`, and a UUID in any case, as one thread: a retry that spelled
    the same conversation another way was refused as another request (attack round 10)."""
    fields = body.model_dump(mode="json", exclude={"stream", "stream_options"}, exclude_none=True)
    ref = body.conversation
    if ref is not None:
        named = ref if isinstance(ref, str) else ref.id
        fields["conversation"] = canonical_uuid(named) or named
    previous = body.previous_response_id
    if previous is not None:  # a run id, taken in any case as well
        fields["previous_response_id"] = canonical_uuid(previous) or previous
    return fields


async def _answered(
    module: AgentModule,
    turn: StartedTurn,
    run_id: str,
    created_at: float,
    body: CreateResponseIn,
    thread: Thread,
    definition: AgentDefinition,
) -> JSONResponse:
    """The unstreamed answer, once the turn has ended. Shielded: a client that goes away does
    not cancel the turn, whose answer is stored either way."""
    result = await asyncio.shield(turn.task)
    created_at = await _run_created_at(module, result.run_id, created_at)
    out = response_out(
        run_id=result.run_id,
        agent=definition.name,
        thread_id=thread.id,
        created_at=created_at,
        status="completed",
        output=output_items(result.message),
        report=result.report,
        previous_response_id=body.previous_response_id,
        definition=definition,
    )
    return JSONResponse(out.model_dump(mode="json"))


def _refuse_unsupported(body: CreateResponseIn) -> None:
    for name in UNSUPPORTED_PARAMETERS:
        if getattr(body, name) is not None:
            raise UnsupportedParameter(
                name,
                f"{name!r} is not supported: the agent's own system prompt, tools and model "
                "settings apply",
            )
    if body.store is False:
        raise UnsupportedParameter("store", "every turn is stored; store=false is not supported")


def _input_text(value: str | list[InputMessage]) -> str:
    """The user's message: a string, or exactly one `user` message item."""
    if isinstance(value, str):
        text = value
    else:
        if len(value) != 1 or value[0].role != "user":
            raise UnsupportedParameter(
                "input",
                "input must be a string or one message with role 'user' (the agent's history "
                "is kept by the server: pass conversation or previous_response_id)",
            )
        content = value[0].content
        text = content if isinstance(content, str) else "\n".join(p.text for p in content)
    if not text.strip():
        raise InvalidParameter("input", "input must not be empty")
    return text


async def _run_created_at(module: AgentModule, run_id: str, default: float) -> float:
    """When the run began, as its runtime recorded it: what a retrieve and a keyed repeat
    answer, so the create call answers it too (one read of the run's row). The app's clock
    gave another value (by a millisecond on PostgreSQL, by up to a second on SQLite, which
    keeps whole seconds); `default` stands where the runtime keeps no time, or the read
    failed."""
    try:
        record = await module.loop.runtime.get_run(run_id)
    except StoreError:  # the answer is stored: a failed read of its date does not fail it
        return default
    created = record.created_at if record is not None else None
    return created.timestamp() if created is not None else default


async def _thread_for(
    module: AgentModule, actor: Actor, body: CreateResponseIn, keyed: Idempotency | None
) -> Thread:
    """The thread the turn runs in: `conversation`'s, `previous_response_id`'s, or a new one
    (with an Idempotency-Key, the one named after the actor and the key: see `_keyed_thread`)."""
    if body.conversation is not None and body.previous_response_id is not None:
        raise InvalidParameter(
            "previous_response_id", "pass conversation or previous_response_id, not both"
        )
    if body.conversation is not None:
        ref = body.conversation
        thread = await owned_thread(module, ref if isinstance(ref, str) else ref.id, actor)
    elif body.previous_response_id is not None:
        thread = await _thread_of_response(module, body.previous_response_id, actor)
    else:
        if body.model is None:
            raise InvalidParameter(
                "model", "name the agent in model (or pass conversation or previous_response_id)"
            )
        definition = module.loop.definition(body.model)
        if keyed is not None:
            return await _keyed_thread(module, actor, definition.name, keyed)
        await module.loop.check_quota(actor.id)  # a turn refused makes no conversation
        return await module.store.create_thread(actor_id=actor.id, agent=definition.name)
    if body.model is not None and body.model != thread.agent:
        raise InvalidParameter(
            "model",
            f"this conversation belongs to agent {thread.agent!r}, not {echoed(body.model)}",
        )
    return thread


async def _keyed_thread(
    module: AgentModule, actor: Actor, agent: str, keyed: Idempotency
) -> Thread:
    """A new thread for a keyed request, created once under an id named after the actor and
    the key: its retry (which would otherwise start a thread, and a turn, of its own) finds
    the same thread and, in it, the key's run. The store's insert decides a race of the two.
    A thread of that id erased whole (its conversation deleted) is not made again: the key's
    turn ran, and what it answered is gone (410 `answer_erased`, the model not called).
    Over quota, a key that names no thread yet makes none (429): a retry of a key that does is
    still answered with the key's turn, and one whose thread was erased is the 410 it would be
    under quota (found by attack: it was a 429, so a client waited for a quota that would
    never answer it)."""
    thread_id = keyed_thread_id(actor.id, keyed.key)
    try:
        await module.loop.check_quota(actor.id)
    except QuotaExceeded:
        if await module.store.get_thread_info(thread_id) is None:
            if await _erased(module, thread_id):
                raise AnswerErased(None) from None
            raise
    try:
        thread = await module.store.create_named_thread(
            thread_id, actor_id=actor.id, agent=agent, unless_erased=True
        )
    except ThreadErased:
        raise AnswerErased(None) from None
    if thread.actor_id != actor.id or thread.agent != agent:
        raise IdempotencyKeyReused(None)  # the key first started a thread of another agent
    return thread


async def _erased(module: AgentModule, thread_id: str) -> bool:
    """Whether the thread was erased whole (its conversation deleted), as the store recorded."""
    store = module.store
    return supports_erased_reads(store) and await store.thread_erased(thread_id)


async def _thread_of_response(module: AgentModule, response_id: str, actor: Actor) -> Thread:
    canonical = canonical_uuid(response_id)
    record = await module.loop.runtime.get_run(canonical) if canonical else None
    if record is None or record.request.actor_id != actor.id:
        raise PreviousResponseNotFound(response_id)
    return await module.loop.owned_thread(record.request.thread_id, actor.id)


async def get_response(
    response_id: ResponseIdPath, actor: ActorDep, module: ModuleDep
) -> ResponseOut:
    canonical = canonical_uuid(response_id)
    record = await module.loop.runtime.get_run(canonical) if canonical else None
    if canonical is None or record is None or record.request.actor_id != actor.id:
        raise RunNotFound(response_id)
    request = record.request
    output: list[Item] = []
    if record.status == "completed":
        answer = answer_of(await run_messages(module.store, request.thread_id, canonical))
        output = output_items(answer) if answer is not None else []
    error = None
    if record.error_code is not None:
        message = public_message(record.error_code, record.error_message or "")
        error = response_error(record.error_code, message)
    return response_out(
        run_id=canonical,
        agent=request.agent,
        thread_id=request.thread_id,
        created_at=record.created_at,
        status=record.status,
        output=output,
        report=RunReport.model_validate(record.report) if record.report is not None else None,
        error=error,
        previous_response_id=request.follows_run,
        definition=module.loop.agents.get(request.agent),
    )


__all__ = ["create_response", "get_response"]
