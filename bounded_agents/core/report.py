"""What a run measured: the figures users read before they trim.

They are filled where the numbers arise (the read, each journal write, each model call), never
estimated afterwards.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bounded_agents.core.messages import Message
from bounded_agents.core.ports.store import FoldHealth


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
    cached_tokens: int | None = None
    """Of `prompt_tokens`, those the provider says it served from its prompt cache; None when
    it did not say."""
    prefix_reused_messages: int = 0
    """`chat` calls: leading messages of the prompt sent that equal the previous chat call's
    prompt in the same thread (the previous step of this run, or the last call of the run
    before): what a provider's prompt cache can serve."""
    prefix_reused_tokens: int = 0
    """Their estimated tokens."""
    prompt_estimated_tokens: int = 0
    """`chat` calls: estimated tokens of the whole prompt sent, for comparison."""
    previous_prompt_messages: int | None = None
    """Messages of that previous prompt; None when none was known (a thread's first call, or
    a store that keeps no prompt digest)."""
    extends_previous: bool = False
    """The whole previous prompt is a prefix of this one."""


class LedgerRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    estimated: bool = False
    """Booked by the token estimate: the provider reported no usage."""
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    """Of `prompt_tokens`, those written to the provider's prompt cache (Anthropic's cache
    creation, billed above plain input)."""


class PromptCacheReport(BaseModel):
    """A run's chat calls against a provider's prompt cache: how much of each prompt repeated
    the previous one (measured here) and what the provider says it served from its cache."""

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    """Chat calls of the run."""
    compared: int = 0
    """Of them, those with a previous prompt to compare with."""
    extended: int = 0
    """Of them, those whose prompt extended the previous call's whole prompt."""
    prompt_messages: int = 0
    prompt_tokens: int = 0
    """Estimated tokens of every chat prompt sent (not the provider's count)."""
    reused_messages: int = 0
    reused_tokens: int = 0
    """Estimated tokens of the prefixes repeated from the previous call."""
    cached_tokens: int | None = None
    """The provider's cached prompt tokens, summed; None when it reported none."""


def prompt_cache_report(calls: list[ModelCallReport]) -> PromptCacheReport:
    """The run's chat calls' figures, summed."""
    chat = [c for c in calls if c.purpose == "chat"]
    cached = [c.cached_tokens for c in chat if c.cached_tokens is not None]
    return PromptCacheReport(
        calls=len(chat),
        compared=sum(1 for c in chat if c.previous_prompt_messages is not None),
        extended=sum(1 for c in chat if c.extends_previous),
        prompt_messages=sum(c.messages_sent for c in chat),
        prompt_tokens=sum(c.prompt_estimated_tokens for c in chat),
        reused_messages=sum(c.prefix_reused_messages for c in chat),
        reused_tokens=sum(c.prefix_reused_tokens for c in chat),
        cached_tokens=sum(cached) if cached else None,
    )


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
    """Fold chunks (`history:summarize` steps) this run made, refused ones included; their
    summarizer calls are `calls`."""
    input_messages: int = 0
    input_tokens: int = 0
    """Estimated tokens handed to the summarizer: the summary so far plus the new messages."""
    clipped: int = 0
    """Folds whose summary was still longer than its cap (`summary_token_cap`) after it
    was asked to compress itself, and was cut to its end
    (`bounded_agents.core.summary.clip_summary`, which tells the model so). What was cut is lost;
    the journal records the characters (`clipped_chars`)."""
    archived: int = 0
    """Folds whose summary was still over its cap after compressing and whose oldest part was
    ARCHIVED (`SummaryArchive`: stored with its seq range, searchable, erased with the thread)
    instead of clipped: nothing left the agent's reach. The journal records the characters
    (`archived_chars`)."""
    messages_cut: int = 0
    """Messages handed to the summarizer cut to their head and end, because alone they were
    longer than its context (the provider refused them whole): the summary stands for the
    part it saw; the full message stays in the database."""
    compressed: int = 0
    """Folds whose summary outgrew its cap and was folded into itself by one more summarizer
    call (`fold_task="compress"`), so nothing had to be clipped."""
    calls: int = 0
    """Summarizer calls this run made (chunks, a halved chunk's retry, compressions), at most
    the loop's `fold_calls_per_turn`."""
    call_budget: int | None = Field(default=None, exclude=True)
    """The budget `calls` is held to, as the run's first fold step journaled it (internal: a
    resumed run keeps to its journal's budget, not the resuming process's)."""
    rejected: int = 0
    """Folds whose answer was refused (`bounded_agents.core.summary.fold_rejection`) or whose call
    failed: nothing was stored, and the fold is owed to a later turn."""
    rejected_reasons: list[str] = Field(default_factory=list)
    """Why, per refused fold: `empty`, `truncated`, `tool_call`, `refused`, `echo`,
    `unrelated` (it shares too little with what it folds: `fold_health.judge_relatedness`),
    `too_long` (a one-message chunk the provider refused), `failed:<error code>`,
    `failed:timeout`."""
    outcome: str | None = None
    """The last fold attempt's outcome this run: `ok` (stored), a refusal reason (as in
    `rejected_reasons`), `backoff` (not attempted: the thread is waiting after failed folds),
    None when no fold was attempted."""
    failures: int = 0
    """The thread's consecutive refused or failed folds after this run (0 when healthy)."""
    backoff_turns: int = 0
    """Turns before the thread's next fold attempt (0: the next turn may fold); it grows
    1, 2, 4, ... up to `bounded_agents.core.fold_health.BACKOFF_MAX_TURNS` while folds fail."""
    health: FoldHealth | None = Field(default=None, exclude=True)
    """The thread's fold health as this run last knew it (internal: a mid-run refold, whose
    fold `load:thread` did not journal, decides its backoff from it)."""
    deferred: bool = False
    """True when the run spent its summarizer calls before the fold was done: the rest of the
    backlog is folded by later turns."""
    pending: int = 0
    """Messages this run's fold owed that the summary still does not cover (rejected,
    deferred or backing off): the memory's debt. They ride in the prompt up to a cap, and
    are folded later."""
    omitted: int = 0
    """Of `pending`, those left out of this run's prompt by that cap (never out of the database);
    the prompt says how many."""


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
    prompt_cache: PromptCacheReport | None = None
    """The chat calls' prefix reuse and cached tokens, summed (None before the run ended)."""
    cleared_results: int = 0
    """Tool results of the kept history the prompt carried as placeholders instead of whole
    (tool-result clearing, `clear_tool_results_keep`); the stored rows are untouched."""
    cleared_tokens: int = 0
    """Their estimated tokens (the content left out of the prompt)."""


class RunResult(BaseModel):
    """What `run_turn` and `resume` return."""

    run_id: str
    message: Message
    report: RunReport
