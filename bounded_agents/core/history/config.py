"""`HistoryConfig`: the declarative history (`history=` in code, `AGENT_HISTORY_*` in the
environment), checked whole at wiring time so a mistyped or contradictory key fails loudly
instead of silently choosing a strategy. `policy_from_config` (in `bounded_agents.core.history`)
turns it into a policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bounded_agents.core.history.clearing import DEFAULT_CLEAR_STEP_TOKENS, ToolResultClearing
from bounded_agents.core.history.runs import DEFAULT_KEEP_RECENT_RUNS
from bounded_agents.core.ports import Summarizer
from bounded_agents.core.summary import DEFAULT_FOLD_MAX_TOKENS
from bounded_agents.errors import ConfigError


class HistoryConfig(BaseModel):
    """The declarative history `history=` takes (a plain dict is accepted too, see `coerce`),
    with HasteKit's configuration surface. One strategy per config:

    - a window: `max_messages` and/or `max_tokens` (with no limit at all, 40 messages);
      `min_messages`/`min_tokens` make it a hysteresis window (`max_*` the high mark);
      `summarize` makes it a rolling summarizing window (`fold_messages`, `fold_tokens`, or
      `min_*`: then the fold cuts back from `max_*` to `min_*`);
    - a runs window: `runs` (whole runs, nothing summarized);
    - summarized runs: `summary_token_threshold` with `summarize` (and `keep_recent_runs`);
    - `enabled=False`: only the current user message.

    Invalid values, unknown keys and strategies mixed in one config are a `ConfigError` naming
    the key (`coerce` turns pydantic's error into one).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    """False sends only the current user message: the model sees no history at all."""
    max_messages: int | None = Field(default=None, ge=1)
    """Keep at most this many newest messages."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Keep the newest messages whose estimated tokens fit. Whichever limit cuts more wins."""
    min_messages: int | None = Field(default=None, ge=1)
    """The low mark: the window grows from here to `max_messages` and is then cut back here,
    at a run's start, so prompts between cuts extend each other (a provider's prompt cache
    hits). Summarizing, the count a fold cuts back to (`fold_messages = max - min`)."""
    min_tokens: int | None = Field(default=None, ge=1)
    """The same as `min_messages`, in estimated tokens, below `max_tokens`."""
    runs: int | None = Field(default=None, ge=1)
    """Keep the newest this many runs whole (HasteKit's sliding window)."""
    summarize: bool | Summarizer = False
    """True folds what the window leaves out into a rolling summary made by the module's model
    (`summarize_with_model`); a `Summarizer` is used as is; False drops it."""
    summary_token_threshold: int | None = Field(default=None, ge=1)
    """Summarize old runs once the history's estimated tokens reach this (HasteKit's LLM
    summarization); needs `summarize`."""
    keep_recent_runs: int = Field(default=DEFAULT_KEEP_RECENT_RUNS, ge=1)
    """With `summary_token_threshold`: runs kept verbatim when the rest is summarized."""
    fold_messages: int | None = Field(default=None, ge=1)
    """Summarizing window: unsummarized messages past `max_messages` that trigger a fold
    (default half the window, at least 4)."""
    fold_tokens: int | None = Field(default=None, ge=1)
    """Summarizing window: unsummarized tokens past `max_tokens` that trigger a fold."""
    fold_max_tokens: int = Field(default=DEFAULT_FOLD_MAX_TOKENS, ge=1)
    """Summarizer input per call at most; a longer backlog is folded in several calls."""
    cache_ttl_seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Summarizing window: how long this agent's provider keeps a prompt cache idle, where it
    differs from the module's AGENT_HISTORY_CACHE_TTL_SECONDS (None: that one). A thread idle
    this long folds as soon as a fold is within half a batch; 0 never folds early."""
    summary_carry: Literal["rewrite", "append"] = "rewrite"
    """With `summarize=True`: how the built-in summarizer carries the summary so far forward
    (`summarize_with_model`'s `carry`): `rewrite` asks the model for the updated summary,
    `append` asks it for notes on the new messages alone and appends them (for small models
    that drop what they are asked to copy)."""
    clear_tool_results_keep: int | None = Field(default=None, ge=0)
    """Tool-result clearing (off by default): the newest this many tool results of the kept
    history ride verbatim, older ones are replaced IN THE PROMPT by a placeholder naming the
    tool, its size and seq (the stored row untouched, `search_history` still finds it)."""
    clear_tool_results_step_tokens: int = Field(default=DEFAULT_CLEAR_STEP_TOKENS, ge=1)
    """With `clear_tool_results_keep`: clearing moves in steps of at least this many
    estimated tokens, so the prompt prefix (and a provider's cache) changes only at a step."""

    @property
    def tool_result_clearing(self) -> ToolResultClearing | None:
        """The clearing these settings ask for, or None (off)."""
        if self.clear_tool_results_keep is None:
            return None
        return ToolResultClearing(
            keep_results=self.clear_tool_results_keep,
            step_tokens=self.clear_tool_results_step_tokens,
        )

    @model_validator(mode="after")
    def _one_strategy(self) -> HistoryConfig:
        window = self.max_messages is not None or self.max_tokens is not None
        summarizing = self.summarize is not False
        if self.runs is not None and (window or self.summary_token_threshold is not None):
            raise ValueError(
                "runs: a runs window cannot be combined with max_messages, "
                "max_tokens or summary_token_threshold"
            )
        if self.runs is not None and summarizing:
            raise ValueError(
                "runs: a runs window drops old runs; to summarize them set "
                "summary_token_threshold (and keep_recent_runs) instead"
            )
        if self.summary_token_threshold is not None:
            if window:
                raise ValueError(
                    "summary_token_threshold: summarized runs cannot be combined "
                    "with max_messages or max_tokens"
                )
            if not summarizing:
                raise ValueError("summary_token_threshold: needs summarize (True or a summarizer)")
        elif "keep_recent_runs" in self.model_fields_set:
            raise ValueError("keep_recent_runs: only applies with summary_token_threshold")
        if (
            "clear_tool_results_step_tokens" in self.model_fields_set
            and self.clear_tool_results_keep is None
        ):
            raise ValueError(
                "clear_tool_results_step_tokens: only applies with clear_tool_results_keep"
            )
        for key in ("fold_messages", "fold_tokens", "cache_ttl_seconds"):
            if getattr(self, key) is not None and not (window and summarizing):
                raise ValueError(f"{key}: only applies to a summarizing window")
        for unit in ("messages", "tokens"):
            high, low = getattr(self, f"max_{unit}"), getattr(self, f"min_{unit}")
            fold = getattr(self, f"fold_{unit}")
            if low is None:
                continue
            if high is None:
                raise ValueError(f"min_{unit}: needs max_{unit} (the high mark)")
            if low >= high:
                raise ValueError(f"min_{unit}: must be below max_{unit} ({high})")
            if fold is not None and fold != high - low:
                raise ValueError(
                    f"fold_{unit}: contradicts min_{unit} (a fold cuts from max_{unit} back "
                    f"to min_{unit}, {high - low} at a time); give one of them"
                )
        return self

    @classmethod
    def coerce(cls, value: HistoryConfig | Mapping[str, Any]) -> HistoryConfig:
        """A `HistoryConfig` as is, or one validated from a mapping (`{"max_messages": 6}`).
        A bad mapping is a `ConfigError` naming the key."""
        if isinstance(value, HistoryConfig):
            return value
        if isinstance(value, Mapping):
            try:
                return cls.model_validate(dict(value))
            except ValidationError as exc:
                raise config_error("history", exc) from None
        raise ConfigError(f"history must be a HistoryConfig or a dict, got {value!r}")


def config_error(where: str, exc: ValidationError, prefix: str = "") -> ConfigError:
    """One readable `ConfigError` from pydantic's, each problem led by the key it is about
    (as an environment variable, `AGENT_HISTORY_RUNS`, when `prefix` is given)."""

    def name(key: str) -> str:
        return f"{prefix}{key.upper()}" if prefix else key

    problems = []
    for err in exc.errors():
        message = err["msg"].removeprefix("Value error, ")
        if err["loc"]:
            key = ".".join(str(p) for p in err["loc"])
            problems.append(f"{name(key)}: {message}")
        else:  # a cross-field rule: its message leads with the key already
            key, sep, rest = message.partition(": ")
            problems.append(f"{name(key)}: {rest}" if sep else message)
    return ConfigError(f"invalid {where}: " + "; ".join(problems))


__all__ = ["HistoryConfig", "config_error"]
