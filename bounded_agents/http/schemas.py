"""Request and response bodies of the HTTP API (what /openapi.json documents)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator

from bounded_agents.core.loop import FoldPreview
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import ThreadSummary
from bounded_agents.core.report import RunReport


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateThreadIn(_In):
    title: str | None = Field(default=None, max_length=500)
    """A label for the thread; the agent never sees it."""


class PostMessageIn(_In):
    content: StrictStr
    """The user's message. Must hold something besides whitespace; at most
    `AGENT_MAX_CONTENT_BYTES` bytes of UTF-8 (413 beyond)."""

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must not be empty")
        return value


class ErrorDetail(BaseModel):
    code: str
    """Stable and machine-readable: what clients branch on (`thread_busy`, `provider_timeout`)."""
    message: str
    """For people; may change between versions."""


class ErrorOut(BaseModel):
    """Every error the API answers."""

    error: ErrorDetail
    run_id: str | None = None
    """Present when a run was started and failed: `GET /runs/{run_id}` tells what it did."""


class ThreadCreated(BaseModel):
    id: str
    agent: str
    title: str | None


class ThreadOut(ThreadCreated):
    created_at: datetime | None
    updated_at: datetime | None


class MessagesPage(BaseModel):
    messages: list[Message]
    """Oldest first within the page."""
    next_before: int | None
    """Pass as `before` for the next (older) page; null when there is none."""


class TurnOut(BaseModel):
    """One answered turn: the JSON answer, and the payload of the SSE `done` event."""

    run_id: str
    message: Message
    report: RunReport


class WindowMessage(Message):
    tokens: int
    """Estimated tokens of this message (the estimate the window itself uses)."""


class WindowOut(BaseModel):
    """What the next turn would send, before its new user message."""

    thread_id: str
    agent: str
    read_bound: int | None
    """Newest rows the turn asks the database for; null when no count bounds the read."""
    read_token_bound: int | None = None
    """Token budget the read is bounded by (the stored per-message estimates), if any."""
    read_run_bound: int | None = None
    """Newest runs the read is bounded to, if any."""
    kept: list[WindowMessage]
    dropped_read_count: int = Field(
        description="How many of the rows the bounded read returned the policy did not keep "
        "(the length of `dropped`): not the thread's older messages, which the turn never reads."
    )
    dropped_count: int = Field(
        deprecated=True,
        description="Deprecated alias of `dropped_read_count` (same value), kept for one "
        "release: the name suggested the thread's dropped messages, which it never counted.",
    )
    dropped: list[Message]
    """The rows read that the policy did not keep, oldest first."""
    summarizes: bool
    """True when the next turn would fold messages into the summary (folds happen in turns)."""
    summary: ThreadSummary | None = None
    """The thread's rolling summary, sent before the kept messages; `covers_through_seq` says
    which messages it stands for."""
    next_fold: FoldPreview | None = None
    """The messages (by seq) the next turn would fold into the summary."""
    total_tokens: int
    """Estimated tokens of the kept messages (system prompt and summary not included)."""


class RunOut(RunReport):
    """A run's report, plus who asked for it and how it ended."""

    thread_id: str
    agent: str
    error: ErrorDetail | None = None
    """Set when `status` is `failed`."""
    input_items_url: str | None = None
    """`GET` it for what the run's model was sent, as OpenAI input items (where the app
    includes the `/v1` router: a response is a run, of the same id)."""


class AgentOut(BaseModel):
    name: str


class AgentsOut(BaseModel):
    """The module's agents, by name (`bounded-agents chat` picks the only one)."""

    agents: list[AgentOut]


class HealthOut(BaseModel):
    status: str
