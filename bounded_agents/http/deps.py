"""Dependencies of the routes, as `Annotated` aliases.

The module reaches a route through the request scope, put there by the router's route class
(`bounded_agents.http.route.agent_route_class`) before any dependency runs. That keeps the routes
plain module-level functions and lets two modules' routers live in one host app.

Ownership answers are deliberately indistinguishable: a missing thread, another actor's thread
and an id that is not a UUID at all are the same 404 `thread_not_found`.
"""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Final

from fastapi import Depends, Path, Request
from pydantic import BeforeValidator

from bounded_agents.actors import Actor
from bounded_agents.core.loop import AgentDefinition
from bounded_agents.core.ports import Thread
from bounded_agents.errors import ConfigError, RunNotFound, ThreadNotFound
from bounded_agents.http.errors import PAIR_AS_TOKEN_HINT, Unauthorized
from bounded_agents.module import AgentModule

MODULE_SCOPE_KEY = "bounded_agents.agent_module"

_DIGITS: Final = re.compile(r"0|[1-9][0-9]*")


def _digits_only(value: object) -> object:
    if isinstance(value, str) and not _DIGITS.fullmatch(value):
        raise ValueError("must be a whole number written in digits only, as listed (like 3)")
    return value


DIGITS_ONLY: Final = BeforeValidator(_digits_only)
"""Put on a `seq` path or query parameter: it takes only plain ASCII digits. Pydantic's lax
integers also read `1.0`, `+2`, ` 3` and `1_0`, so `DELETE .../messages/1.0` would erase
message 1 where a client most likely sent something else by mistake; an erasure is for good."""


def get_module(request: Request) -> AgentModule:
    module = request.scope.get(MODULE_SCOPE_KEY)
    if not isinstance(module, AgentModule):
        raise ConfigError(
            "this route was not built for an AgentModule (use bounded_agents.http.build_router)"
        )
    return module


ModuleDep = Annotated[AgentModule, Depends(get_module)]


async def get_actor(request: Request, module: ModuleDep) -> Actor:
    """The actor the module's resolver names; 401 `unauthorized` when it names none."""
    actor = await module.actor_resolver(request)
    if actor is None:
        _scheme, _, token = request.headers.get("authorization", "").partition(" ")
        raise Unauthorized(PAIR_AS_TOKEN_HINT if "=" in token.strip() else "")
    return actor


ActorDep = Annotated[Actor, Depends(get_actor)]


def canonical_uuid(value: str) -> str | None:
    """`value` in the form ids are stored in (`str(uuid4())`), or None if it is not a UUID."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


ThreadIdPath = Annotated[
    str, Path(description="The thread's id (a UUID).", json_schema_extra={"format": "uuid"})
]
RunIdPath = Annotated[
    str, Path(description="The run's id (a UUID).", json_schema_extra={"format": "uuid"})
]
AgentPath = Annotated[str, Path(description="The agent's name, as in `@agent(name=...)`.")]


async def get_owned_thread(thread_id: ThreadIdPath, actor: ActorDep, module: ModuleDep) -> Thread:
    """The thread (without its messages) if the actor owns it; 404 `thread_not_found` for a
    missing thread, another actor's thread, or an id that is not a UUID."""
    canonical = canonical_uuid(thread_id)
    if canonical is None:
        raise ThreadNotFound(thread_id)
    return await module.loop.owned_thread(canonical, actor.id)


OwnedThreadDep = Annotated[Thread, Depends(get_owned_thread)]


def get_agent_definition(agent: AgentPath, module: ModuleDep) -> AgentDefinition:
    """The agent named in the path; 404 `agent_not_found` otherwise."""
    return module.loop.definition(agent)


AgentDefinitionDep = Annotated[AgentDefinition, Depends(get_agent_definition)]


def run_id_or_404(run_id: str) -> str:
    canonical = canonical_uuid(run_id)
    if canonical is None:
        raise RunNotFound(run_id)
    return canonical
