"""The database schema: Alembic's target metadata and the tables the store and journal use.

JSON payloads (tool calls, results, attachments, journal steps) are TEXT that the store encodes
and decodes itself: the bytes the store reports are then the bytes the database returned, and
pydantic parses the JSON straight from the string without a `json.loads` pass in between.

Every key of a thread's tables (`messages`, `runs`, `run_steps`, `thread_summaries`) starts with
`thread_id`, and every key of the usage tables (`ledger`, `actor_usage`) with `actor_id`: what
Citus needs to distribute them by those columns (docs/scale-out.md). On one server it costs a
thread id per journal step and a plain index on `runs.id`: the turn's statements name the
thread anyway.
"""

from __future__ import annotations

import sqlalchemy as sa

from bounded_agents.core.ports import IDEMPOTENCY_KEY_CHARS, MODEL_NAME_CHARS

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


_ID = sa.String(36)
_NOW = sa.func.current_timestamp()
_PRUNABLE = "status = 'completed' AND steps_pruned_at IS NULL"
_PRUNABLE_FAILED = "status = 'failed' AND steps_pruned_at IS NULL"
_KEYED = "idempotency_key IS NOT NULL"

threads = sa.Table(
    "threads",
    metadata,
    sa.Column("id", _ID, primary_key=True),
    sa.Column("actor_id", sa.String(200), nullable=False),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("title", sa.String(500), nullable=True),
    sa.Column("last_seq", sa.Integer, nullable=False, server_default="0"),
    # `last_seq` is the append counter: bumping it with UPDATE ... RETURNING takes the row lock
    # that keeps `seq` contiguous under concurrent appends, on PostgreSQL and SQLite alike.
    # Because `seq` runs 1..last_seq without gaps, "the newest n messages" is the seq range
    # `> last_seq - n`: a bound the read computes without counting rows.
    sa.Column("total_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("answered", sa.Boolean, nullable=False, server_default=sa.false()),
    # Whether the thread was ever answered, set by the append that stores an answer: the turn
    # read takes it from this row instead of probing `messages`, whose plan PostgreSQL may
    # make a scan of the table.
    # The thread's running token estimate, bumped with `last_seq`: a token-budget read finds
    # where its window starts by comparing it with each message's `tokens_before`.
    sa.Column("last_prompt", sa.Text, nullable=True),
    # A digest of the last chat prompt sent in the thread (a few bytes per message, see
    # `bounded_agents.core.prefix`), written with the run's answer in the same UPDATE and returned
    # by the next turn's read: how much of it the next prompt repeats is what a prompt cache can
    # reuse.
    sa.Column("last_reported_tokens", sa.BigInteger, nullable=True),
    # The provider's count (prompt + completion) of the thread's last chat call, written with
    # `last_prompt`; NULL when that call's usage was an estimate. A token threshold prefers it
    # to the estimate, as HasteKit does.
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.Column("fold_health", sa.Text, nullable=True),
    # The thread's fold health (`FoldHealth` as JSON: the last fold's outcome, the backoff
    # after refused or failed folds); NULL while its folds never failed, so a healthy thread
    # never writes it. Read with the turn's page, written only when it changes.
    sa.Column("searchable", sa.Boolean, nullable=False, server_default=sa.true()),
    # Whether the thread's messages go into the history search index (migration 0016): off for
    # threads of agents declared without `search`, so their turns never feed an index nobody
    # reads; turned on (and the old rows indexed) when such an agent turns search on.
    sa.Index("ix_threads_actor_id_updated_at", "actor_id", "updated_at"),
    sa.Index("ix_threads_agent_searchable", "agent", "searchable"),
    # Start-up's index_agents (_THREADS_OFF, _TURN_OFF: agent IN ...) reads it, no scan (0018).
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("thread_id", _ID, sa.ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    # Keyed by (thread_id, seq), which also serves every bounded read (a `seq` range of one
    # thread); there is no surrogate id: nothing ever looked a message up by one.
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("tool_calls", sa.Text, nullable=True),
    sa.Column("tool_results", sa.Text, nullable=True),
    sa.Column("attachments", sa.Text, nullable=True),
    sa.Column("run_id", _ID, nullable=True),
    sa.Column("search_text", sa.Text, nullable=True),
    # The tool results' text the search indexes beside `content` (all but the search tool's
    # own: `bounded_agents.core.search_text`); NULL without tool results. Never read back.
    sa.Column("tokens", sa.Integer, nullable=False, server_default="0"),
    # The message's token estimate (`estimate_message_tokens`), fixed when it is stored.
    sa.Column("tokens_before", sa.BigInteger, nullable=False, server_default="0"),
    # The sum of `tokens` of every earlier message of the thread. The newest messages that fit a
    # budget B are exactly those with `tokens_before >= total_tokens - B`: a range on an index.
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.Column("indexed", sa.Boolean, nullable=False, server_default=sa.true()),
    # Whether the row is in the search index: its thread's `searchable` when it was stored (the
    # append reads it from the bumped thread row), set later by a backfill. The index triggers
    # fire for indexed rows only.
    # Serves "has this thread ever been answered" (an index-only existence probe) and "where does
    # the n-th newest run start" (the n-th newest user message, walked backwards by seq).
    sa.Index("ix_messages_thread_id_role_seq", "thread_id", "role", "seq"),
    # Serves the token-budget read: the first message whose `tokens_before` reaches the floor.
    sa.Index("ix_messages_thread_id_tokens_before", "thread_id", "tokens_before"),
    # A run stores one user message and one answer: a replayed persist step can never store a
    # second copy, whatever moment the process died at.
    sa.Index("uq_messages_thread_id_run_id_role", "thread_id", "run_id", "role", unique=True),
    sa.CheckConstraint("role IN ('system', 'user', 'assistant')", name="role"),
)

thread_summaries = sa.Table(
    "thread_summaries",
    metadata,
    sa.Column("thread_id", _ID, sa.ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("covers_through_seq", sa.Integer, primary_key=True),
    # Keyed by thread and boundary: a fold replayed after a crash writes the row it already
    # wrote, and the insert that finds it is a no-op. The newest boundary is the live summary.
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("run_id", _ID, nullable=True),
    sa.Column("model", sa.String(MODEL_NAME_CHARS), nullable=False, server_default=""),
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("completion_tokens", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
)

summary_archive = sa.Table(
    "summary_archive",
    metadata,
    sa.Column("thread_id", _ID, sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    sa.Column("from_seq", sa.Integer, nullable=False),
    sa.Column("to_seq", sa.Integer, nullable=False),
    # The seq range of the messages the archived notes were written from: an erasure of any
    # of them deletes the part (it may quote the message).
    sa.Column("content", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.PrimaryKeyConstraint("thread_id", "from_seq", "to_seq"),
    # Keyed by thread and range: a replayed fold archives a part once (the first text stays).
)
"""Parts of a thread's summary that could not be compressed below its cap: kept, searchable
(migration 0012 indexes them as it does messages), instead of clipped away."""

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", _ID, nullable=False),
    sa.Column("thread_id", _ID, sa.ForeignKey("threads.id", ondelete="CASCADE"), nullable=False),
    sa.Column("actor_id", sa.String(200), nullable=False),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("request", sa.Text, nullable=False),
    sa.Column("error_code", sa.String(64), nullable=True),
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("report", sa.Text, nullable=True),
    sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
    # Which attempt holds the lease (a token per begin or claim): a process that lost its
    # lease while stalled can no longer journal, renew or end the run another one took over.
    sa.Column("owner", sa.String(36), nullable=True),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.PrimaryKeyConstraint("thread_id", "id"),
    sa.CheckConstraint("status IN ('running', 'completed', 'failed')", name="status"),
    # The thread lease: at most one running run per thread, enforced by the database itself.
    sa.Index(
        "uq_runs_thread_id_running",
        "thread_id",
        unique=True,
        postgresql_where=sa.text("status = 'running'"),
        sqlite_where=sa.text("status = 'running'"),
    ),
    sa.Column("steps_pruned_at", sa.DateTime(timezone=True), nullable=True),
    # When the run's journal (`run_steps`) was deleted by retention; NULL while it is kept.
    sa.Column("idempotency_key", sa.String(IDEMPOTENCY_KEY_CHARS), nullable=True),
    sa.Column("request_fingerprint", sa.String(64), nullable=True),
    # The turn's Idempotency-Key and a digest of the request it came with (NULL without one).
    # They live on the run's row, so a key is kept exactly as long as the run's report.
    sa.Index(
        "uq_runs_thread_id_actor_id_idempotency_key",
        "thread_id",
        "actor_id",
        "idempotency_key",
        unique=True,
        postgresql_where=sa.text(_KEYED),
        sqlite_where=sa.text(_KEYED),
    ),
    # One run per key, actor and thread, decided by the database: two concurrent requests
    # with one key cannot both insert their run (the second's insert fails, and it answers
    # the first's outcome). Partial: unkeyed runs cost it nothing.
    sa.Index("ix_runs_status_lease_expires_at", "status", "lease_expires_at"),
    # A run looked up by its id alone (GET /runs/{id}, reopening a run): not unique, because a
    # distributed table's unique keys must hold the thread; run ids are UUIDs all the same.
    sa.Index("ix_runs_id", "id"),
    # The pruner's queue: completed runs whose journal is still there, oldest end first.
    sa.Index(
        "ix_runs_prunable",
        "updated_at",
        postgresql_where=sa.text(_PRUNABLE),
        sqlite_where=sa.text(_PRUNABLE),
    ),
    # Its other queue: failed runs nobody resumed, whose journals expire later.
    sa.Index(
        "ix_runs_prunable_failed",
        "updated_at",
        postgresql_where=sa.text(_PRUNABLE_FAILED),
        sqlite_where=sa.text(_PRUNABLE_FAILED),
    ),
)

run_steps = sa.Table(
    "run_steps",
    metadata,
    sa.Column("thread_id", _ID, nullable=False),
    # The run's thread, repeated so a step lives on its thread's shard and its key and foreign
    # key hold the thread.
    sa.Column("run_id", _ID, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.PrimaryKeyConstraint("thread_id", "run_id", "position"),
    sa.ForeignKeyConstraint(
        ["thread_id", "run_id"], ["runs.thread_id", "runs.id"], ondelete="CASCADE"
    ),
)

ledger = sa.Table(
    "ledger",
    metadata,
    sa.Column("id", sa.BigInteger, nullable=False, autoincrement=False),
    # The row's number among the actor's rows (1, 2, 3...), taken from `actor_usage.last_ledger_id`
    # by the same statement that adds the row's tokens to the actor's total. Not an autoincrement:
    # the key must hold `actor_id` (Citus), and SQLite autoincrements only a lone INTEGER PRIMARY
    # KEY; a counter on the actor's usage row is the same on both backends, needs no sequence,
    # and costs no statement (the bump was already there).
    sa.Column("run_id", _ID, nullable=False),
    sa.Column("thread_id", _ID, nullable=False),
    sa.Column("actor_id", sa.String(200), nullable=False),
    sa.Column("agent", sa.String(200), nullable=False),
    sa.Column("purpose", sa.String(32), nullable=False),
    sa.Column("model", sa.String(MODEL_NAME_CHARS), nullable=False),
    # BIGINT: a call may report up to `MAX_CALL_TOKENS` per field, and sums of them must fit.
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
    sa.Column("completion_tokens", sa.BigInteger, nullable=False),
    sa.Column("estimated", sa.Boolean, nullable=False, server_default=sa.false()),
    # True when the figures are the token estimate (the provider reported no usage).
    sa.Column("cached_tokens", sa.BigInteger, nullable=False, server_default="0"),
    # Of `prompt_tokens`, those the provider served from its prompt cache (0 when it did not
    # say): booked apart so cost figures can price them below uncached input.
    sa.Column("cache_write_tokens", sa.BigInteger, nullable=False, server_default="0"),
    # Of `prompt_tokens`, those the provider wrote to its prompt cache (Anthropic's
    # `cache_creation_input_tokens`, billed above uncached input; 0 when it did not say).
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.PrimaryKeyConstraint("actor_id", "id"),
    sa.Index("ix_ledger_run_id", "run_id"),
)


actor_usage = sa.Table(
    "actor_usage",
    metadata,
    sa.Column("actor_id", sa.String(200), primary_key=True),
    sa.Column("tokens", sa.BigInteger, nullable=False, server_default="0"),
    # The running total a quota checks: one row per actor, bumped with each ledger row, so the
    # check costs the same on an actor's thousandth turn as on the first.
    sa.Column("last_ledger_id", sa.BigInteger, nullable=False, server_default="0"),
    # The `id` of the actor's newest ledger row: the next row takes the one after it.
)


erased_threads = sa.Table(
    "erased_threads",
    metadata,
    # The id of a thread erased whole (`delete_thread`) and its owner: nothing of what it held.
    # A keyed `/v1` request names the thread it starts after the actor and the key; a retry of
    # it after the conversation was deleted reads this (`create_named_thread`'s `unless_erased`)
    # and is told the answer is gone, instead of creating the thread, and running the turn,
    # again. It outlives the erasure for AGENT_ERASED_THREAD_RETENTION_SECONDS (the owner's id
    # is personal data too), then the sweep deletes it (`erase.prune_erased`). On Citus in the
    # threads' group, by the thread id.
    sa.Column("id", _ID, primary_key=True),
    sa.Column("actor_id", sa.String(200), nullable=False),
    sa.Column("erased_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # The sweep deletes rows older than AGENT_ERASED_THREAD_RETENTION_SECONDS, oldest first.
    sa.Index("ix_erased_threads_erased_at", "erased_at"),
)


token_ratios = sa.Table(
    "token_ratios",
    metadata,
    # Per model name, the ratio of the prompt tokens its provider reported to the chars/4
    # estimate (`bounded_agents.core.calibration`), so a restarted process sizes windows and
    # fold chunks by it from its first turn. One small row per model, read once at start-up:
    # on Citus a reference table (a copy on every node), keyed by nothing of a thread's.
    sa.Column("model", sa.String(MODEL_NAME_CHARS), primary_key=True),
    sa.Column("ratio", sa.Float, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
)
