"""The OpenAI-compatible `/v1` API (docs/openai-api.md): the official `openai` SDK talks to the
module's threads with `base_url=".../v1"`.

    api.py            `build_openai_router`: assembles the routes below into one router
    models.py         GET /v1/models: the agents, as models
    conversations.py  /v1/conversations: a conversation is a thread, its items the transcript
    responses.py      /v1/responses: a response is a run
    input_items.py    /v1/responses/{id}/input_items: what the run's model was sent
    erase.py          the Conversations API's deletes, over the module's erasure
    schemas.py        the request and response bodies, in the SDK's shapes
    items.py          stored messages and runs as conversation items and Responses
    stream.py         a turn as the Responses API's Server-Sent Events
    errors.py         the `{"error": {...}}` shape every `/v1` route answers with

    app.include_router(build_router(module))
    app.include_router(build_openai_router(module))

`build_openai_router` is loaded on first use, as `bounded_agents` serves its names: importing
one module of the family (the native routes' `sent_prompt` reads `errors.py`) then does not
import the whole API, which imports that very caller back, half-initialized.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bounded_agents.http.openai.api import build_openai_router

__all__ = ["build_openai_router"]


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(import_module("bounded_agents.http.openai.api"), name)
    globals()[name] = found
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
