"""An OpenAI Responses/Conversations-compatible API over the module's threads, under `/v1`, so
the official `openai` SDK works unchanged with `base_url="http://127.0.0.1:8000/v1"`.

    GET  /v1/models                              the agents (a model is an agent's name)
    GET  /v1/models/{model}
    POST /v1/conversations                       create a thread (agent: metadata["agent"])
    GET  /v1/conversations/{conversation_id}     the thread
    GET  /v1/conversations/{conversation_id}/items   its transcript as items (?limit&after&order)
    POST /v1/responses                           run one turn (JSON, or SSE with "stream": true)
    GET  /v1/responses/{response_id}             a run as a Response
    GET  /v1/responses/{response_id}/input_items what its model was sent, as items

The mapping: a conversation is a thread, a response is a run (same id: `GET /runs/{id}` reports
it too), `model` is the agent's name. `responses.create` runs the turn in `conversation`, or in
the thread of `previous_response_id`, or else in a new thread of agent `model`; the agent's
bounded history applies as on every other route, because this router calls the same
`start_turn` as `POST /agents/{agent}/threads/{id}/messages`. The bearer key names the actor,
and an actor sees only its own conversations and responses (404 otherwise).

Errors have the OpenAI shape (`errors`). The routes live by subject: `models`,
`conversations`, `responses`, `input_items`; the shapes in `schemas`
and `items`, the SSE events in `stream`. This module only assembles them into one
router.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter

from bounded_agents.http.errors import OPENAI_PREFIX
from bounded_agents.http.openai.conversations import (
    create_conversation,
    get_conversation,
    list_items,
)
from bounded_agents.http.openai.erase import build_openai_erase_router
from bounded_agents.http.openai.errors import openai_error_response
from bounded_agents.http.openai.input_items import list_input_items
from bounded_agents.http.openai.models import get_model, list_models
from bounded_agents.http.openai.responses import create_response, get_response
from bounded_agents.http.openai.schemas import (
    ConversationOut,
    ItemsPage,
    ModelOut,
    ModelsOut,
    OpenAIErrorOut,
    ResponseOut,
)
from bounded_agents.http.route import agent_route_class
from bounded_agents.module import AgentModule

PREFIX: Final = OPENAI_PREFIX

_COMMON: Final = (400, 401, 404, 500, 503)
"""What every conversation and response route can answer."""


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": OpenAIErrorOut} for s in statuses}


def build_openai_router(module: AgentModule) -> APIRouter:
    """The `/v1` routes. Include it next to `build_router(module)`:
    `app.include_router(build_openai_router(module))`."""
    router = APIRouter(
        prefix=PREFIX,
        tags=["OpenAI-compatible"],
        route_class=agent_route_class(module, openai_error_response),
    )
    _add_model_routes(router)
    _add_conversation_routes(router)
    _add_response_routes(router)
    router.include_router(build_openai_erase_router(module))
    return router


def _add_model_routes(router: APIRouter) -> None:
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


def _add_conversation_routes(router: APIRouter) -> None:
    router.add_api_route(
        "/conversations",
        create_conversation,
        methods=["POST"],
        response_model=ConversationOut,
        responses=_errors(*_COMMON),
        summary="Create a conversation (a thread)",
    )
    router.add_api_route(
        "/conversations/{conversation_id}",
        get_conversation,
        methods=["GET"],
        response_model=ConversationOut,
        responses=_errors(*_COMMON),
        summary="A conversation",
    )
    router.add_api_route(
        "/conversations/{conversation_id}/items",
        list_items,
        methods=["GET"],
        response_model=ItemsPage,
        responses=_errors(*_COMMON),
        summary="A conversation's transcript as items",
    )


def _add_response_routes(router: APIRouter) -> None:
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
        responses=_errors(*_COMMON),
        summary="A response (a run)",
    )
    router.add_api_route(
        "/responses/{response_id}/input_items",
        list_input_items,
        methods=["GET"],
        response_model=ItemsPage,
        responses=_errors(*_COMMON, 410),
        summary="What a response's model was sent, as items",
    )


__all__ = ["build_openai_router", "openai_error_response"]
