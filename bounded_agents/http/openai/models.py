"""`GET /v1/models`: the agents, as models. A model here is an agent's name, so the SDK's
`model=` picks the agent a new conversation runs with."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from bounded_agents.http.deps import ActorDep, ModuleDep
from bounded_agents.http.openai.schemas import ModelOut, ModelsOut


async def list_models(_actor: ActorDep, module: ModuleDep) -> ModelsOut:
    return ModelsOut(data=[ModelOut(id=name) for name in module.loop.agents])


async def get_model(
    model: Annotated[str, Path(description="An agent's name.")],
    _actor: ActorDep,
    module: ModuleDep,
) -> ModelOut:
    return ModelOut(id=module.loop.definition(model).name)


__all__ = ["get_model", "list_models"]
