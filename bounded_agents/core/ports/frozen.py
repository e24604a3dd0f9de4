"""The base of every port value: immutable, and refusing fields it does not know."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


__all__ = ["Frozen"]
