"""History policies: which stored messages of a thread a turn sends to the model.

A policy's `select(messages, ctx)` splits what it is handed into what the turn keeps and what it
drops. The loop calls it inside the `load:thread` checkpoint and journals its result, so `select`
must be PURE (no clock, no flags, no I/O): a resumed run has to window exactly as the first
attempt did. Anything non-deterministic belongs in `summarize`, which runs in checkpoints of its
own. The SPI types (`HistoryPolicy`, `HistorySelection`, `HistorySummary`, ...) live in
`bounded_agents.core.ports` and are re-exported here.

Every built-in policy reads a bounded number of rows per turn (`read_bound`), whatever the
thread's length:

- `window_history`: the newest `max_messages` and/or the newest messages that fit `max_tokens`.
- `runs_window`: the newest `max_runs` runs.
- A SUMMARIZING policy (`window_history(summarize=...)`, `summarizing_runs_window`) is rolling:
  the thread keeps one summary whose boundary (`covers_through_seq`) only moves forward; a turn
  reads that summary plus the messages after it, and folds a batch into the next summary only
  when the unsummarized part passes a high mark (hysteresis: between folds every prompt extends
  the previous one). Nothing is ever both out of the prompt and out of the summary.

`HistoryConfig` is the declarative form; `resolve_policy` applies the precedence agent ->
module `history_policy` -> module `history`.

The family, one module per concept; every public name of the first four is re-exported here,
where users import them from (`from bounded_agents.core.history import window_history`):

    windows.py   message and token windows (`window_history`, `whole_thread`, ...)
    runs.py      runs windows (`runs_window`, `summarizing_runs_window`, `split_runs`)
    config.py    `HistoryConfig`, the declarative form
    build.py     `policy_from_config`, `resolve_policy`, `validate_module_history`
    powers.py    what a policy may declare beyond `select`, as protocols the loop probes
                 (`supports_*`, `read_bound`, `fold_budget`): the loop's vocabulary, imported
                 from `bounded_agents.core.history.powers`
    clearing.py  tool-result clearing (`ToolResultClearing`): old tool results replaced by
                 placeholders in the prompt, in steps a provider's cache survives
"""

from __future__ import annotations

from bounded_agents.core.history.build import (
    HistorySpec,
    policy_from_config,
    resolve_policy,
    validate_module_history,
)
from bounded_agents.core.history.config import HistoryConfig, config_error
from bounded_agents.core.history.runs import (
    DEFAULT_KEEP_RECENT_RUNS,
    RunsWindow,
    SummarizingRunsWindow,
    runs_window,
    split_runs,
    summarizing_runs_window,
)
from bounded_agents.core.history.windows import (
    DEFAULT_FOLD_MESSAGES,
    DEFAULT_WINDOW_MESSAGES,
    WholeThread,
    WindowHistory,
    latest_message_only,
    whole_thread,
    window_history,
)
from bounded_agents.core.ports import (
    HistoryPolicy,
    HistoryPolicyContext,
    HistorySelection,
    HistorySummary,
    Summarizer,
    SummaryRenderer,
)

__all__ = [
    "DEFAULT_FOLD_MESSAGES",
    "DEFAULT_KEEP_RECENT_RUNS",
    "DEFAULT_WINDOW_MESSAGES",
    "HistoryConfig",
    "HistoryPolicy",
    "HistoryPolicyContext",
    "HistorySelection",
    "HistorySpec",
    "HistorySummary",
    "RunsWindow",
    "Summarizer",
    "SummarizingRunsWindow",
    "SummaryRenderer",
    "WholeThread",
    "WindowHistory",
    "config_error",
    "latest_message_only",
    "policy_from_config",
    "resolve_policy",
    "runs_window",
    "split_runs",
    "summarizing_runs_window",
    "validate_module_history",
    "whole_thread",
    "window_history",
]
