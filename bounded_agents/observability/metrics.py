"""Prometheus metrics of turns: what an operator graphs to see the window hold in production.

Each module gets a registry of its own (not prometheus-client's global one), so two modules in
one process, or in one test session, never collide; `/metrics` serves that registry. Labels are
the agent, the outcome and the model call's purpose: never a thread, run or actor id, so the
number of series stays bounded however many threads there are.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
ROW_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000, 100000)
BYTE_BUCKETS = (1e3, 1e4, 5e4, 1e5, 2.5e5, 5e5, 1e6, 1e7, 1e8)


class TurnMetrics:
    """The collectors, registered on `registry` (a fresh one by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._add_run_collectors(self.registry)
        self._add_read_collectors(self.registry)
        self._add_summary_collectors(self.registry)

    def _add_run_collectors(self, r: CollectorRegistry) -> None:
        """How runs end, how long they and their model calls take, what they spend, and runs
        refused or resumed."""
        self.turns = Counter(
            "agent_turns",
            "Runs that ended, by agent and outcome (completed, failed, cancelled); `error` is "
            "the failure's code.",
            ["agent", "outcome", "error"],
            registry=r,
        )
        self.turn_seconds = Histogram(
            "agent_turn_duration_seconds",
            "Wall time of a run attempt, from its start (or resume) to its end.",
            ["agent", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.model_seconds = Histogram(
            "agent_model_call_duration_seconds",
            "Wall time of one model call (the checkpoint that makes it), by purpose: chat or "
            "history_summary. Replayed calls are not counted.",
            ["agent", "purpose"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "agent_tokens",
            "Tokens spent, by purpose (chat, history_summary) and type (input, output), as the "
            "provider reported them.",
            ["agent", "purpose", "type"],
            registry=r,
        )
        self.busy = Counter(
            "agent_thread_busy",
            "Turns refused because another run held the thread (HTTP 409 `thread_busy`).",
            ["agent"],
            registry=r,
        )
        self.resumed = Counter(
            "agent_runs_resumed",
            "Runs taken back from their journal: `lease_expired` after their process died, "
            "`failed` when a failed run was resumed.",
            ["agent", "reason"],
            registry=r,
        )

    def _add_read_collectors(self, r: CollectorRegistry) -> None:
        """What each turn's thread read returned: the figures a bounded read keeps flat."""
        self.rows_read = Histogram(
            "agent_turn_rows_read",
            "Messages the turn's thread read returned.",
            ["agent"],
            buckets=ROW_BUCKETS,
            registry=r,
        )
        self.bytes_read = Histogram(
            "agent_turn_bytes_read",
            "Payload bytes the turn's thread read returned.",
            ["agent"],
            buckets=BYTE_BUCKETS,
            registry=r,
        )

    def _add_summary_collectors(self, r: CollectorRegistry) -> None:
        """What became of each fold: made, refused, compressed, clipped."""
        self.summaries = Counter(
            "agent_summaries",
            "Rolling summaries made and stored (one per fold chunk; a long backlog folds in "
            "several). A refused one is counted in agent_summaries_rejected instead.",
            ["agent"],
            registry=r,
        )
        self.summaries_rejected = Counter(
            "agent_summaries_rejected",
            "Fold chunks whose summarizer answer was refused or whose call failed, by reason "
            "(empty, truncated, tool_call, refused, echo, unrelated, too_long, failed:<code>): "
            "nothing was "
            "stored, and a later turn folds them.",
            ["agent", "reason"],
            registry=r,
        )
        self.summaries_compressed = Counter(
            "agent_summaries_compressed",
            "Summaries that outgrew their cap and were compressed by one more summarizer call.",
            ["agent"],
            registry=r,
        )
        self.summaries_clipped = Counter(
            "agent_summaries_clipped",
            "Summaries still over their cap after that, cut to it: what was cut is lost (the "
            "summary tells the model so).",
            ["agent"],
            registry=r,
        )
        self.summaries_archived = Counter(
            "agent_summaries_archived",
            "Summaries still over their cap after compressing whose oldest part was archived "
            "(kept, searchable, erasable) instead of cut.",
            ["agent"],
            registry=r,
        )

        # Memory health (issue 36): how far behind the summary is, and folds held back.
        self.folds_backed_off = Counter(
            "agent_folds_backed_off",
            "Turns whose owed fold was not attempted: the thread is waiting out the backoff "
            "after refused or failed folds (1, 2, 4 ... 32 turns). Rising with "
            "agent_summaries_rejected: the summarizer is broken, and cheap.",
            ["agent"],
            registry=r,
        )
        self.fold_messages_owed = Histogram(
            "agent_fold_messages_owed",
            "Per summarizing turn: messages beyond the window that the summary does not cover "
            "(the report's summary.pending). Healthy: 0 on most turns.",
            ["agent"],
            buckets=(0, 1, 4, 16, 64, 256, 1024, 4096),
            registry=r,
        )

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, looked up once: prometheus-client's own lookup takes a lock
        and validates the labels on every call, a measurable part of a turn's overhead."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found
