"""The HTTP API (docs/http-api.md): threads, turns (JSON or SSE), transcript, window, runs.

    POST /agents/{agent}/threads                      201 ThreadCreated
    POST /agents/{agent}/threads/{thread_id}/messages TurnOut, or SSE (Accept: text/event-stream)
    GET  /threads/{thread_id}                         ThreadOut
    GET  /threads/{thread_id}/messages                MessagesPage (?limit=&before=)
    GET  /threads/{thread_id}/window                  WindowOut
    GET  /runs/{run_id}                               RunOut
    GET  /healthz                                     HealthOut
    GET  /metrics                                     Prometheus text (AGENT_METRICS=false: none)
    GET  /inspect/...                                 the inspector (AGENT_INSPECTOR=false: none)

Every route with a thread or run id answers 401 with no actor and 404 for anything the actor
does not own. Errors are mapped by `bounded_agents.http.errors` (see there for why the route class
does it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bounded_agents.core.messages import MAX_SEQ, Message
from bounded_agents.core.report import RunReport, RunResult
from bounded_agents.errors import (
    RunNotFound,
    StoreError,
    ThreadNotFound,
)
from bounded_agents.http.deps import (
    DIGITS_ONLY,
    ActorDep,
    AgentDefinitionDep,
    ModuleDep,
    OwnedThreadDep,
    RunIdPath,
    run_id_or_404,
)
from bounded_agents.http.erase import build_erase_router
from bounded_agents.http.errors import public_message
from bounded_agents.http.idempotency import IdempotencyKeyHeader, idempotency
from bounded_agents.http.inspector import build_inspector_router
from bounded_agents.http.route import agent_route_class
from bounded_agents.http.schemas import (
    AgentOut,
    AgentsOut,
    CreateThreadIn,
    ErrorDetail,
    ErrorOut,
    HealthOut,
    MessagesPage,
    PostMessageIn,
    RunOut,
    ThreadCreated,
    ThreadOut,
    TurnOut,
    WindowMessage,
    WindowOut,
)
from bounded_agents.http.sse import accepts_event_stream, turn_response
from bounded_agents.http.turns import start_turn
from bounded_agents.module import register_router_factory

if TYPE_CHECKING:
    from bounded_agents.module import AgentModule

log = logging.getLogger("bounded_agents.http")

HEALTH_TIMEOUT_SECONDS = 5.0

_DESCRIPTIONS = {
    400: "The body is not JSON that can be read (`invalid_json`), or the request is "
    "malformed (`bad_request`).",
    401: "No actor: a missing or unknown API key (`unauthorized`).",
    404: "No such agent, or no such thread/run for this actor (`*_not_found`).",
    409: "A turn is already running on this thread (`thread_busy`), or the turn this "
    "`Idempotency-Key` names still runs (`turn_in_progress`: retry for its answer).",
    410: "The `Idempotency-Key`'s turn completed and its answer was erased since "
    "(`answer_erased`), or an erasure failed the run (`journal_erased`); `run_id` names it.",
    413: "The content is over `AGENT_MAX_CONTENT_BYTES` (`content_too_large`).",
    422: "The request does not validate (`validation_error`, `invalid_content`), or its "
    "`Idempotency-Key` came first with another body (`idempotency_key_reused`).",
    429: "The actor's token quota is spent (`quota_exceeded`).",
    500: "Internal error (`internal_error`); details are logged, never sent.",
    502: "The model provider failed (`provider_*`); `run_id` names the failed run.",
    503: "The database is unavailable (`store_error`).",
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": ErrorOut, "description": _DESCRIPTIONS[s]} for s in statuses}


def build_router(module: AgentModule) -> APIRouter:
    """The module's routes. Include it in any FastAPI app: errors are mapped by its route
    class, so it keeps its contract without `install_error_handlers`."""
    router = APIRouter(route_class=agent_route_class(module))
    _add_turn_routes(router)
    _add_thread_routes(router)
    _add_run_and_health_routes(router)
    if module.metrics is not None:
        router.add_api_route(
            "/metrics", metrics, methods=["GET"], include_in_schema=False, response_class=Response
        )
    if module.settings.inspector:
        router.include_router(build_inspector_router(module, "/inspect"))
    router.include_router(build_erase_router(module))
    return router


def _add_turn_routes(router: APIRouter) -> None:
    router.add_api_route(
        "/agents",
        list_agents,
        methods=["GET"],
        response_model=AgentsOut,
        responses=_errors(401, 500),
        summary="The agents this server runs, by name",
    )
    router.add_api_route(
        "/agents/{agent}/threads",
        create_thread,
        methods=["POST"],
        status_code=201,
        response_model=ThreadCreated,
        responses=_errors(400, 401, 404, 413, 422, 500, 503),
        summary="Start a thread with an agent",
    )
    router.add_api_route(
        "/agents/{agent}/threads/{thread_id}/messages",
        post_message,
        methods=["POST"],
        response_model=TurnOut,
        responses={
            200: {
                "description": "The answer as JSON, or with `Accept: text/event-stream` a "
                "stream of `delta`, `tool_call`, `tool_result` events ending in `done` "
                "(a TurnOut) or `error` (an ErrorOut).",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            **_errors(400, 401, 404, 409, 410, 413, 422, 429, 500, 502, 503),
        },
        summary="Send a message and get the agent's answer",
    )


def _add_thread_routes(router: APIRouter) -> None:
    router.add_api_route(
        "/threads/{thread_id}",
        get_thread,
        methods=["GET"],
        response_model=ThreadOut,
        responses=_errors(401, 404, 422, 500, 503),
        summary="A thread's metadata",
    )
    router.add_api_route(
        "/threads/{thread_id}/messages",
        list_messages,
        methods=["GET"],
        response_model=MessagesPage,
        responses=_errors(401, 404, 422, 500, 503),
        summary="One page of the transcript, newest page first, oldest first within it",
    )
    router.add_api_route(
        "/threads/{thread_id}/window",
        get_window,
        methods=["GET"],
        response_model=WindowOut,
        responses=_errors(401, 404, 422, 500, 503),
        summary="What the next turn would send the model",
    )


def _add_run_and_health_routes(router: APIRouter) -> None:
    router.add_api_route(
        "/runs/{run_id}",
        get_run,
        methods=["GET"],
        response_model=RunOut,
        responses=_errors(401, 404, 422, 500, 503),
        summary="A run's report: rows and bytes read, journal bytes, model calls, ledger",
    )
    router.add_api_route(
        "/healthz",
        healthz,
        methods=["GET"],
        response_model=HealthOut,
        responses=_errors(500, 503),
        summary="Liveness, and a cheap query against the store",
    )


# --- threads -------------------------------------------------------------------------------


async def create_thread(
    actor: ActorDep,
    definition: AgentDefinitionDep,
    module: ModuleDep,
    body: Annotated[CreateThreadIn | None, Body()] = None,
) -> ThreadCreated:
    """Start a thread owned by the caller."""
    title = body.title if body is not None else None
    thread = await module.store.create_thread(actor_id=actor.id, agent=definition.name, title=title)
    return ThreadCreated(id=thread.id, agent=thread.agent, title=thread.title)


async def get_thread(thread: OwnedThreadDep) -> ThreadOut:
    return ThreadOut(
        id=thread.id,
        agent=thread.agent,
        title=thread.title,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
    )


async def list_messages(
    thread: OwnedThreadDep,
    module: ModuleDep,
    limit: Annotated[int, Query(ge=1, le=200, description="Messages per page.")] = 50,
    before: Annotated[
        int | None,
        DIGITS_ONLY,
        Query(ge=1, le=MAX_SEQ, description="Only messages with `seq` below this."),
    ] = None,
) -> MessagesPage:
    page = await transcript_page(module, thread.id, limit + 1, before)  # one extra: is there more?
    more = len(page) > limit
    page = page[1:] if more else page
    next_before = page[0].seq if more and page else None
    return MessagesPage(messages=page, next_before=next_before)


async def transcript_page(
    module: AgentModule, thread_id: str, limit: int, before: int | None
) -> list[Message]:
    """Up to `limit` messages with `seq < before` (the newest when None), oldest first. A bound
    past `MAX_SEQ` bounds nothing (every stored seq is below it) and would overflow PostgreSQL's
    integer (a 503 for `DELETE .../items/msg_2147483647`, found by attack): it is dropped."""
    if before is not None and before > MAX_SEQ:
        before = None
    return await module.store.list_messages(thread_id, limit=limit, before=before)


async def get_window(thread: OwnedThreadDep, actor: ActorDep, module: ModuleDep) -> WindowOut:
    preview = await module.loop.preview(thread.id, actor.id, thread=thread)
    kept = [
        WindowMessage(**m.model_dump(), tokens=t)
        for m, t in zip(preview.kept, preview.tokens, strict=True)
    ]
    return WindowOut(
        thread_id=preview.thread_id,
        agent=preview.agent,
        read_bound=preview.read_bound,
        read_token_bound=preview.read_token_bound,
        read_run_bound=preview.read_run_bound,
        kept=kept,
        dropped_read_count=len(preview.dropped),
        dropped_count=len(preview.dropped),
        dropped=preview.dropped,
        summarizes=preview.summarizes,
        summary=preview.summary,
        next_fold=preview.next_fold,
        total_tokens=preview.total_tokens,
    )


# --- turns ---------------------------------------------------------------------------------


async def post_message(
    actor: ActorDep,
    thread: OwnedThreadDep,
    definition: AgentDefinitionDep,
    module: ModuleDep,
    body: PostMessageIn,
    request: Request,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Run one turn. JSON by default; SSE when the client accepts `text/event-stream`.

    Either way the turn runs in a task of its own: a client that disconnects or a request
    that is cancelled does not stop it, and its answer is stored. With an `Idempotency-Key`,
    a repeat is answered with the first turn's answer, in the form this request asked for.
    """
    if thread.agent != definition.name:
        raise ThreadNotFound(thread.id)  # the thread exists, but not under this agent
    wants_stream = accepts_event_stream(request.headers.get("accept", ""))
    turn = await start_turn(
        module,
        agent=definition.name,
        thread=thread,
        actor_id=actor.id,
        content=body.content,
        stream=wants_stream,
        idempotency=idempotency(
            idempotency_key,
            "messages",
            body.model_dump(mode="json"),
            module.settings.fingerprint_secret(),
        ),
    )
    if turn.queue is None or turn.first is None:
        result = await asyncio.shield(turn.task)
        return JSONResponse(_turn_out(result).model_dump(mode="json"))
    return turn_response(turn.first, turn.queue, turn.task)


def _turn_out(result: RunResult) -> TurnOut:
    return TurnOut(run_id=result.run_id, message=result.message, report=result.report)


# --- runs and health -----------------------------------------------------------------------


async def get_run(run_id: RunIdPath, actor: ActorDep, module: ModuleDep) -> RunOut:
    canonical = run_id_or_404(run_id)
    record = await module.loop.runtime.get_run(canonical)
    if record is None or record.request.actor_id != actor.id:
        raise RunNotFound(run_id)
    report = (
        RunReport.model_validate(record.report)
        if record.report is not None
        else RunReport(run_id=canonical)
    )
    error = None
    if record.error_code is not None:
        message = public_message(record.error_code, record.error_message or "")
        error = ErrorDetail(code=record.error_code, message=message)
    return RunOut(
        **{**report.model_dump(), "status": record.status},
        thread_id=record.request.thread_id,
        agent=record.request.agent,
        error=error,
        input_items_url=f"/v1/responses/{canonical}/input_items",
    )


async def list_agents(_actor: ActorDep, module: ModuleDep) -> AgentsOut:
    """Sorted by name; a client offers them, or picks the only one."""
    return AgentsOut(agents=[AgentOut(name=name) for name in sorted(module.loop.agents)])


async def healthz(module: ModuleDep) -> HealthOut:
    """Answers only when the store does: one primary-key lookup of a thread that cannot exist."""
    store = module.store
    probe = str(uuid.uuid4())
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT_SECONDS):
            await store.get_thread_info(probe)
    except TimeoutError:
        raise StoreError(f"the store did not answer within {HEALTH_TIMEOUT_SECONDS} s") from None
    return HealthOut(status="ok")


async def metrics(module: ModuleDep) -> Response:
    """Prometheus text format. Open like `/healthz`: the series carry agent names and outcomes,
    never a thread, run or actor."""
    assert module.metrics is not None  # the route exists only with metrics on
    body = generate_latest(module.metrics.registry)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)


register_router_factory(build_router)  # serves the deprecated `module.router` (one release)

__all__: Sequence[str] = ["build_router", "transcript_page"]
