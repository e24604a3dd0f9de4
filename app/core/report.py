"""What a run measured: the figures users read before they trim.

They are filled where the numbers arise (the read, each journal write, each model call), never
estimated afterwards.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from app.core.messages import Message


class ModelCallReport(BaseModel):
    """One model call: its purpose, its tokens, and what the chat middleware cut from it.

    For a `chat` call, `messages_original` counts the provider-shaped messages the loop built and
    `messages_sent` those left after the chat middleware. For a `history_summary` call both count
    the dropped thread messages the summary was made from: the middleware does not touch it, and
    all of them go into it (`summarize_with_model` renders them as one transcript message).
    """

    model_config = ConfigDict(extra="forbid")

    purpose: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    window_trimmed: bool = False
    messages_sent: int = 0
    messages_original: int = 0
    window_orphans_dropped: int = 0


class LedgerRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int


class RunReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    status: str = "running"
    read_bound: int | None = None
    """The `message_limit` the store was asked for; None when it read the whole thread (or
    when no read happened: a run resumed after its process died replays `load:thread`)."""
    rows_read: int = 0
    """Messages the thread read returned. A run resumed after a failure carries the figures of
    the attempt that read; one resumed after its process died replays the read and reports 0."""
    bytes_read: int = 0
    """Payload bytes (content + tool calls, results, attachments) the read returned."""
    journal_bytes: dict[str, int] = {}
    """Checkpoint name -> bytes of its journaled payload."""
    model_calls: list[ModelCallReport] = []
    ledger: list[LedgerRow] = []


class RunResult(BaseModel):
    """What `run_turn` and `resume` return."""

    run_id: str
    message: Message
    report: RunReport
