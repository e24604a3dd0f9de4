"""Who is asking: the actor a request names, and the two ways of naming one.

A header names the actor, but which resolver a module uses is chosen where the module is
composed (`AgentModule.for_root`: the one given, else API keys, else local mode), so identity
lives below both: `bounded_agents.module` and the routes in `bounded_agents.http` import it,
and neither imports the other for it. A turn run without HTTP takes a plain `actor_id`.
(`bounded_agents.http.auth`, where this lived, re-exports it.)
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping

from fastapi import Request
from pydantic import BaseModel, ConfigDict

LOCAL_ACTOR = "local"
"""The actor of every request in local development mode (no `AGENT_API_KEYS`)."""


class Actor(BaseModel):
    """Who is asking. Every thread belongs to the actor that created it."""

    model_config = ConfigDict(frozen=True)
    id: str


ActorResolver = Callable[[Request], Awaitable[Actor | None]]


def api_key_resolver(keys: Mapping[str, str]) -> ActorResolver:
    """`Authorization: Bearer <key>` names the actor; keys are compared in constant time."""
    pairs = [(k.encode(), actor) for k, actor in keys.items()]

    async def resolve(request: Request) -> Actor | None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        given = token.strip().encode()
        found: str | None = None
        for key, actor in pairs:  # no early exit: the time taken does not depend on the match
            if hmac.compare_digest(key, given):
                found = actor
        return Actor(id=found) if found is not None else None

    return resolve


async def local_actor(_request: Request) -> Actor:
    """Local development mode (no API keys configured): everyone is actor `local`."""
    return Actor(id=LOCAL_ACTOR)


def default_resolver(keys: Mapping[str, str]) -> tuple[ActorResolver, bool]:
    """The resolver a module gets when none is given, and whether that is local mode: API keys
    when `AGENT_API_KEYS` names any, else everyone is `local`. No keys means the variable is
    unset: the settings refuse one that is set but names none (`AGENT_API_KEYS=""`)."""
    return (api_key_resolver(keys), False) if keys else (local_actor, True)


__all__ = [
    "LOCAL_ACTOR",
    "Actor",
    "ActorResolver",
    "api_key_resolver",
    "default_resolver",
    "local_actor",
]
