"""The loop's numbers: configured defaults and bounds, so named once. The journal's names and
patch markers are `bounded_agents.core.checkpoints`'."""

from __future__ import annotations

COMPLETION_RESERVE = 1024
"""Tokens held for a model call's answer while it is in flight, on top of its estimated prompt
(see `AgentLoop._reserve`): the quota is then overshot by at most the last call it admitted,
unless calls in flight at that moment answer at greater length than this."""
DEFAULT_FOLD_CALLS_PER_TURN = 2
"""Summarizer calls one run may make (`AGENT_HISTORY_FOLD_CALLS_PER_TURN`): a fold costs at most
this many calls on top of the turn's own, however long the backlog."""
DEFAULT_FOLD_TIMEOUT_SECONDS = 120.0
"""How long one summarizer call may take (`AGENT_HISTORY_FOLD_TIMEOUT_SECONDS`) before the turn
gives the fold up and answers without it."""
DEFAULT_MODEL_CALL_TIMEOUT_SECONDS = 600.0
"""How long one chat model call may take in all (`AGENT_MODEL_CALL_TIMEOUT_SECONDS`), however
steadily it streams: a stream that never ends, or that only sends keep-alives, fails the run
(`provider_timeout`) instead of holding its thread for good (found by attack). A provider's
own timeout is per read, and a slow stream never trips it."""
DEFAULT_TOOL_TIMEOUT_SECONDS = 120.0
"""How long one tool call may take (`AGENT_TOOL_TIMEOUT_SECONDS`) before the model reads an
error result instead (found by attack: a hung tool held the turn and its thread for good)."""
MAX_ANSWER_CHARS = 2_000_000
"""The most text one model call may stream: past it the call fails as a bad response. Far past
any model's longest answer; it bounds what a lying server can make the process hold (found by
attack: an endless stream of 32 KB deltas grew the process by 509 MB in 20 s)."""
DEFAULT_CACHE_TTL_SECONDS = 300.0
"""How long a provider keeps a prompt cache idle (`AGENT_HISTORY_CACHE_TTL_SECONDS`): 5
minutes, Anthropic's default and the low end of OpenAI's in-memory retention."""
UNBOUNDED_CALLS = 1_000_000
"""The call budget of a run whose journal predates the budget: its replay is not cut short."""
BACKLOG_READ_ROWS = 256
"""Rows one backlog read of a fold fetches: a long backlog is read in pages of this size."""


READ_FIGURES = (
    "read_bound",
    "read_token_bound",
    "read_run_bound",
    "read_after_seq",
    "rows_read",
    "bytes_read",
)

__all__ = [
    "BACKLOG_READ_ROWS",
    "COMPLETION_RESERVE",
    "DEFAULT_CACHE_TTL_SECONDS",
    "DEFAULT_FOLD_CALLS_PER_TURN",
    "DEFAULT_FOLD_TIMEOUT_SECONDS",
    "DEFAULT_MODEL_CALL_TIMEOUT_SECONDS",
    "DEFAULT_TOOL_TIMEOUT_SECONDS",
    "MAX_ANSWER_CHARS",
    "READ_FIGURES",
    "UNBOUNDED_CALLS",
]
