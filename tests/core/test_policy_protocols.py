"""The powers a history policy may declare, listed: adding or renaming one is a visible change."""

from __future__ import annotations

import inspect

from bounded_agents.core.history import powers as policies
from bounded_agents.core.history import summarizing_runs_window, whole_thread, window_history
from bounded_agents.core.history.powers import (
    POLICY_PROTOCOLS,
    supports_bounded_read,
    supports_refolding,
    supports_summarizing,
)
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import HistoryPolicyContext, HistorySummary


async def _summarize(messages: list[Message], ctx: HistoryPolicyContext) -> HistorySummary:
    return HistorySummary(text="-")


def _members(protocol: type) -> list[str]:
    own = [n for n in vars(protocol) if not n.startswith("_")]
    return sorted({*own, *getattr(protocol, "__annotations__", {})})


def test_the_policy_protocols_are_these_nine_with_these_members() -> None:
    listed = {p.__name__: _members(p) for p in POLICY_PROTOCOLS}
    assert listed == {
        "BoundedReadPolicy": ["read_bound"],
        "MessageCountPolicy": ["max_messages"],
        "SummarizingPolicy": ["summarize"],
        "SummaryRenderingPolicy": ["render_summary"],
        "FoldBudgetPolicy": ["fold_max_tokens"],
        "RefoldingPolicy": ["refold_count"],
        "ClearingPolicy": ["clear_tool_results"],
        "CalibratedPolicy": ["calibrated"],
        "LegacyWindowPolicy": ["window"],
    }
    declared = {
        n
        for n, v in vars(policies).items()
        if inspect.isclass(v) and n.endswith("Policy") and v.__module__ == policies.__name__
    }
    assert declared == set(listed), "every policy protocol in core/history/powers.py is listed"


def test_the_built_in_policies_declare_the_powers_they_use() -> None:
    refolding = summarizing_runs_window(summarize=_summarize, token_threshold=100)
    assert supports_refolding(refolding) and supports_summarizing(refolding)
    folding = window_history(max_messages=4, summarize=_summarize)
    assert supports_summarizing(folding) and not supports_refolding(folding)
    plain = window_history(max_messages=4)
    assert supports_bounded_read(plain) and not supports_summarizing(plain)
    assert not supports_summarizing(whole_thread()) and not supports_refolding(whole_thread())
