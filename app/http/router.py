"""Placeholder: the routes land with the HTTP layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter

if TYPE_CHECKING:
    from app.module import AgentModule


def build_router(module: AgentModule) -> APIRouter:
    return APIRouter()
