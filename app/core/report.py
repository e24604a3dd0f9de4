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
    estimated: bool = False
    """Booked by the token estimate: the provider reported no usage."""


class SummaryReport(BaseModel):
    """The rolling summary this run's prompt carried: made (folded further) or reused."""

    model_config = ConfigDict(extra="forbid")

    made: bool
    """True when this run folded messages into it; False when the stored one was reused."""
    covers_through_seq: int
    """Messages with seq up to this are in the summary, not in the prompt."""
    previous_covers_through_seq: int | None = None
    """Where the summary stood before this run folded (None: there was none)."""
    folds: int = 0
    """Summarizer calls (a long backlog is folded in several bounded chunks)."""
    input_messages: int = 0
    input_tokens: int = 0
    """Estimated tokens handed to the summarizer: the summary so far plus the new messages."""


class RunReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    status: str = "running"
    read_bound: int | None = None
    """The message count the store was asked for; None when no count bounded the read (also
    when the store could not bound it, or no read happened: a run resumed after its process
    died replays `load:thread`)."""
    read_token_bound: int | None = None
    """The token budget the store was asked to read by, if any."""
    read_run_bound: int | None = None
    """The number of newest runs the store was asked to read, if any."""
    read_after_seq: int | None = None
    """The summary boundary the read started after (summarizing policies)."""
    rows_read: int = 0
    """Messages the thread read returned. A run resumed after a failure carries the figures of
    the attempt that read; one resumed after its process died replays the read and reports 0."""
    bytes_read: int = 0
    """Payload bytes (content + tool calls, results, attachments) the read returned."""
    journal_bytes: dict[str, int] = {}
    """Checkpoint name -> bytes of its journaled payload."""
    model_calls: list[ModelCallReport] = []
    ledger: list[LedgerRow] = []
    summary: SummaryReport | None = None


class RunResult(BaseModel):
    """What `run_turn` and `resume` return."""

    run_id: str
    message: Message
    report: RunReport
