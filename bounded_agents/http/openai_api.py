"""An OpenAI Responses/Conversations-compatible API over the module's threads, under `/v1`, so
the official `openai` SDK works unchanged with `base_url="http://127.0.0.1:8000/v1"`.

    GET  /v1/models                              the agents (a model is an agent's name)
    GET  /v1/models/{model}
    POST /v1/conversations                       create a thread (agent: metadata["agent"])
    GET  /v1/conversations/{conversation_id}     the thread
    GET  /v1/conversations/{conversation_id}/items   its transcript as items (?limit&after&order)
    POST /v1/responses                           run one turn (JSON, or SSE with "stream": true)
    GET  /v1/responses/{response_id}             a run as a Response

The mapping: a conversation is a thread, a response is a run (same id: `GET /runs/{id}` reports
it too), `model` is the agent's name. `responses.create` runs the turn in `conversation`, or in
the thread of `previous_response_id`, or else in a new thread of agent `model`; the agent's
bounded history applies as on every other route, because this router calls the same
`start_turn` as `POST /agents/{agent}/threads/{id}/messages`. The bearer key names the actor,
and an actor sees only its own conversations and responses (404 otherwise).

Errors have the OpenAI shape `{"error": {"message", "type", "param", "code"}}`; `code` is this
project's stable code (`thread_busy`, `provider_timeout`, ...), the status is the native API's
except that a request that does not validate is a 400, as OpenAI answers it. A turn that started
and failed adds `"response_id"` and `x-should-retry: false` (the SDK would otherwise retry a 5xx,
and a retry is a second turn); so does a spent quota, which no retry can fix.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Final, Literal

from fastapi import APIRouter, Body, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from bounded_agents.core.messages import MAX_SEQ, Message
from bounded_agents.core.ports import Idempotency, Thread, supports_named_threads
from bounded_agents.core.report import RunReport
from bounded_agents.errors import (
    AgentError,
    AgentNotFound,
    IdempotencyKeyReused,
    InvalidInput,
    RunNotFound,
    ThreadNotFound,
    clipped,
    echoed,
)
from bounded_agents.http.auth import Actor
from bounded_agents.http.deps import ActorDep, ModuleDep, canonical_uuid
from bounded_agents.http.errors import (
    INTERNAL_MESSAGE,
    error_payload,
    public_message,
)
from bounded_agents.http.idempotency import IdempotencyKeyHeader, idempotency, keyed_thread_id
from bounded_agents.http.openai_items import (
    answer_of,
    item_position,
    message_items,
    output_items,
    response_error,
    response_out,
)
from bounded_agents.http.openai_schemas import (
    UNSUPPORTED_PARAMETERS,
    ConversationOut,
    CreateConversationIn,
    CreateResponseIn,
    InputMessage,
    Item,
    ItemsPage,
    ModelOut,
    ModelsOut,
    OpenAIErrorOut,
    ResponseOut,
)
from bounded_agents.http.openai_stream import ResponseStream
from bounded_agents.http.route import agent_route_class
from bounded_agents.http.router import transcript_page
from bounded_agents.http.turns import check_content, start_turn
from bounded_agents.module import AgentModule
from bounded_agents.outcome import run_messages

log = logging.getLogger("bounded_agents.http")

PREFIX: Final = "/v1"
TITLE_MAX_CHARS: Final = 500


class InvalidParameter(InvalidInput):
    """A request parameter this API cannot accept; `param` names it, as OpenAI errors do."""

    code = "invalid_parameter"

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class UnsupportedParameter(InvalidParameter):
    code = "unsupported_parameter"


class PreviousResponseNotFound(RunNotFound):
    param: ClassVar[str] = "previous_response_id"


_PARAM_BY_CODE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "thread_not_found": "conversation",
        "agent_not_found": "model",
        "content_too_large": "input",
        "invalid_content": "input",
    }
)


# --- errors --------------------------------------------------------------------------------


def openai_error(
    status: int,
    code: str,
    message: str,
    *,
    param: str | None = None,
    response_id: str | None = None,
    retry: bool | None = None,
) -> JSONResponse:
    if status == 429:
        kind = "insufficient_quota"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "invalid_request_error"
    body: dict[str, Any] = {
        "error": {"message": message, "type": kind, "param": param, "code": code}
    }
    if response_id is not None:
        body["response_id"] = response_id
    headers: dict[str, str] = {}
    if retry is not None:
        headers["x-should-retry"] = "true" if retry else "false"
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=headers)


def agent_error(error: AgentError) -> JSONResponse:
    status, code, message, run_id = error_payload(error)
    cause = getattr(error, "cause", error)
    if isinstance(cause, ThreadNotFound):
        message = f"conversation {echoed(cause.thread_id)} not found"
    elif isinstance(cause, RunNotFound):
        message = f"response {echoed(cause.run_id)} not found"
    elif isinstance(cause, AgentNotFound):
        message = f"no agent named {echoed(cause.agent)} (a model here is an agent's name)"
    param = getattr(cause, "param", None) or _PARAM_BY_CODE.get(code)
    retry = False if run_id is not None or code == "quota_exceeded" else None
    if code == "turn_in_progress":
        retry = True  # the same request, retried, gets the turn's answer once it ends
    return openai_error(
        400 if status == 422 and code != "idempotency_key_reused" else status,
        code,
        message,
        param=param,
        response_id=run_id,
        retry=retry,
    )


def validation_error(error: RequestValidationError) -> JSONResponse:
    problems = list(error.errors())
    for problem in problems:
        loc = [clipped(str(p)) for p in problem.get("loc", ())]  # a body's key is the caller's
        if loc and loc[0] in ("body", "path", "query", "header"):
            loc = loc[1:]
        param = ".".join(loc) or None
        kind = problem.get("type")
        if kind == "json_invalid":
            return openai_error(400, "invalid_json", "request body is not valid JSON")
        if kind == "extra_forbidden":
            return openai_error(
                400, "unknown_parameter", f"Unknown parameter: {param!r}.", param=param
            )
        msg = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        return openai_error(400, "validation_error", f"{param or 'request'}: {msg}", param=param)
    return openai_error(400, "validation_error", "invalid request")


def openai_error_response(error: Exception) -> Response:
    """The answer to whatever a `/v1` route raised, in OpenAI's error shape."""
    if isinstance(error, AgentError):
        return agent_error(error)
    if isinstance(error, RequestValidationError):
        return validation_error(error)
    if isinstance(error, StarletteHTTPException):
        return openai_error(error.status_code, "http_error", str(error.detail))
    log.error("unhandled error", exc_info=error)
    return openai_error(500, "internal_error", INTERNAL_MESSAGE)


# --- the router ----------------------------------------------------------------------------


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": OpenAIErrorOut} for s in statuses}


def build_openai_router(module: AgentModule) -> APIRouter:
    """The `/v1` routes. Include it next to `module.router`:
    `app.include_router(build_openai_router(module))`."""
    router = APIRouter(
        prefix=PREFIX,
        tags=["OpenAI-compatible"],
        route_class=agent_route_class(module, openai_error_response),
    )
    common = (400, 401, 404, 500, 503)
    router.add_api_route(
        "/models",
        list_models,
        methods=["GET"],
        response_model=ModelsOut,
        responses=_errors(401),
        summary="The agents, as models",
    )
    router.add_api_route(
        "/models/{model}",
        get_model,
        methods=["GET"],
        response_model=ModelOut,
        responses=_errors(401, 404),
        summary="One agent, as a model",
    )
    router.add_api_route(
        "/conversations",
        create_conversation,
        methods=["POST"],
        response_model=ConversationOut,
        responses=_errors(*common),
        summary="Create a conversation (a thread)",
    )
    router.add_api_route(
        "/conversations/{conversation_id}",
        get_conversation,
        methods=["GET"],
        response_model=ConversationOut,
        responses=_errors(*common),
        summary="A conversation",
    )
    router.add_api_route(
        "/conversations/{conversation_id}/items",
        list_items,
        methods=["GET"],
        response_model=ItemsPage,
        responses=_errors(*common),
        summary="A conversation's transcript as items",
    )
    router.add_api_route(
        "/responses",
        create_response,
        methods=["POST"],
        response_model=ResponseOut,
        responses={
            200: {
                "description": 'The Response, or with `"stream": true` its SSE events.',
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            **_errors(400, 401, 404, 409, 413, 429, 500, 502, 503),
        },
        summary="Run one turn",
    )
    router.add_api_route(
        "/responses/{response_id}",
        get_response,
        methods=["GET"],
        response_model=ResponseOut,
        responses=_errors(*common),
        summary="A response (a run)",
    )
    return router


# --- models --------------------------------------------------------------------------------


async def list_models(_actor: ActorDep, module: ModuleDep) -> ModelsOut:
    return ModelsOut(data=[ModelOut(id=name) for name in module.loop.agents])


async def get_model(
    model: Annotated[str, Path(description="An agent's name.")],
    _actor: ActorDep,
    module: ModuleDep,
) -> ModelOut:
    return ModelOut(id=module.loop.definition(model).name)


# --- conversations -------------------------------------------------------------------------

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
    return _conversation(await _owned_thread(module, conversation_id, actor))


def _conversation(thread: Thread) -> ConversationOut:
    metadata = {"agent": thread.agent}
    if thread.title is not None:
        metadata["title"] = thread.title
    created = thread.created_at.timestamp() if thread.created_at else time.time()
    return ConversationOut(id=thread.id, created_at=int(created), metadata=metadata)


async def _owned_thread(module: AgentModule, thread_id: str, actor: Actor) -> Thread:
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
    thread = await _owned_thread(module, conversation_id, actor)
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
    """Oldest first. A thread's seqs are contiguous from 1, so the messages from `start` on
    are the newest ones below `start + n`."""
    out: list[Item] = []
    start = cursor[0] if cursor is not None else 1
    while len(out) < want:
        messages: list[Message] = [
            m
            for m in await transcript_page(module, thread_id, want, _below(start + want))
            if (m.seq or 0) >= start
        ]
        if not messages:
            break
        for message in messages:
            for position, item in message_items(message):
                if cursor is None or position > cursor:
                    out.append(item)
        start = (messages[-1].seq or start) + 1
    return out[:want]


def _below(seq: int) -> int | None:
    """`seq` as a `before` bound for the store; None (no bound) past `MAX_SEQ`, which every
    stored seq is below: the bound itself would overflow the database's integer."""
    return seq if seq <= MAX_SEQ else None


# --- responses -----------------------------------------------------------------------------

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
        idempotency_key,
        "responses",
        body.model_dump(mode="json", exclude={"stream", "stream_options"}, exclude_none=True),
    )
    thread = await _thread_for(module, actor, body, keyed)
    definition = module.loop.definition(thread.agent)
    run_id = str(uuid.uuid4())
    created_at = time.time()
    turn = await start_turn(
        module,
        agent=definition.name,
        thread=thread,
        actor_id=actor.id,
        content=content,
        stream=bool(body.stream),
        run_id=run_id,
        idempotency=keyed,
    )
    if turn.queue is None or turn.first is None:
        result = await asyncio.shield(turn.task)
        if result.run_id != run_id:  # the key's earlier turn: dated as its run is
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
    if turn.run_id != run_id:  # the key's earlier turn
        run_id = turn.run_id
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
    record = await module.loop.runtime.get_run(run_id)
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
        thread = await _owned_thread(module, ref if isinstance(ref, str) else ref.id, actor)
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
    the same thread and, in it, the key's run. The store's insert decides a race of the two."""
    store = module.store
    if not supports_named_threads(store):
        raise InvalidParameter(
            "conversation",
            f"{type(store).__name__} cannot name a new thread after an Idempotency-Key: "
            "pass conversation or previous_response_id with the key",
        )
    thread = await store.create_named_thread(
        keyed_thread_id(actor.id, keyed.key), actor_id=actor.id, agent=agent
    )
    if thread.actor_id != actor.id or thread.agent != agent:
        raise IdempotencyKeyReused(None)  # the key first started a thread of another agent
    return thread


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
        definition=module.loop.agents.get(request.agent),
    )


__all__ = ["build_openai_router", "openai_error_response"]
