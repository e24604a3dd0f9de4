"""The actor of a request, for the routes: `bounded_agents.actors` re-exported under the path
it had before the module (the composition root) stopped importing `http` to choose a
resolver. New code imports from `bounded_agents.actors` (or `bounded_agents.Actor`)."""

from __future__ import annotations

from bounded_agents.actors import (
    LOCAL_ACTOR,
    Actor,
    ActorResolver,
    api_key_resolver,
    default_resolver,
    local_actor,
)

__all__ = [
    "LOCAL_ACTOR",
    "Actor",
    "ActorResolver",
    "api_key_resolver",
    "default_resolver",
    "local_actor",
]
