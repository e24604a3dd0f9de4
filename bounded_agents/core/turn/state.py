"""What one run carries between its phases."""

from __future__ import annotations

from dataclasses import dataclass

from bounded_agents.core.messages import (
    Message,
)
from bounded_agents.core.ports import (
    ThreadSummary,
)


@dataclass(frozen=True)
class _Digest:
    """What a run's answer leaves for the next turn, stored with it: the digest of its last
    chat prompt (prefix reuse) and that call's usage as the provider counted it (None when it
    was an estimate), which a token threshold prefers to its own estimate."""

    prompt: str | None
    reported: int | None


@dataclass
class _Window:
    """A run's history as sent, kept for a mid-run fold: the summary (or the one a refold
    stored since, which the next refold extends), the kept messages (with their seqs) and how
    many prompt messages they fill after the system prompt."""

    summary: ThreadSummary | None
    keep: list[Message]
    head: int
    folds: int
    """Summarizer chunks this run made so far (their checkpoints are numbered on from it)."""
