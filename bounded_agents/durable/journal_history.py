"""What the SQL journal reads of its runs (one run's record, a keyed run, the lapsed runs, a
thread's timeline) and the retention that prunes finished journals. A base of `SqlJournal`, kept
apart from the leases and the step writes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.core.checkpoints import HISTORY_PREFIX, LOAD_THREAD, is_timeline_step
from bounded_agents.core.ports import (
    JsonValue,
    PrunedStatus,
    RunRecord,
    RunRequest,
    RunTrace,
)
from bounded_agents.durable.journal_rows import (
    CANDIDATES_PER_TAKE,
    KEYED_RUN,
    LAPSED,
    shuffle_candidates,
)
from bounded_agents.store import (
    aware_utc,
    db_now,
    messages,
    run_steps,
    runs,
    wrap_db_errors,
    write_transaction,
)


class JournalHistory:
    """`RunTimelineReader` and `JournalPruner` over the `runs` and `run_steps` tables; the
    journal that inherits it provides the engine and the reader."""

    _engine: AsyncEngine
    _reader: AsyncEngine
    _threads: dict[str, str]
    _swept: set[str]

    async def find_keyed_run(
        self, thread_id: str, actor_id: str, key: str
    ) -> tuple[str, str] | None:
        """(run id, request fingerprint) of the thread's run under `key` (`KeyedRunFinder`):
        one lookup on the unique index that holds the key."""
        async with wrap_db_errors("keyed_run"), self._reader.connect() as conn:
            row = (
                await conn.execute(KEYED_RUN, {"tid": thread_id, "actor": actor_id, "key": key})
            ).one_or_none()
        return (row.id, row.request_fingerprint or "") if row is not None else None

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with wrap_db_errors("get_run"), self._reader.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(
                        runs.c.request,
                        runs.c.status,
                        runs.c.error_code,
                        runs.c.error_message,
                        runs.c.report,
                        runs.c.created_at,
                    ).where(runs.c.id == run_id)
                )
            ).one_or_none()
        if row is None:
            return None
        return RunRecord(
            request=RunRequest.model_validate_json(row.request),
            status=row.status,
            error_code=row.error_code,
            error_message=row.error_message,
            report=json.loads(row.report) if row.report else None,
            created_at=aware_utc(row.created_at),
        )

    async def expired_runs(self) -> list[str]:
        """Runs whose lease lapsed, oldest first: a look only (see `claim_expired` to take them)."""
        async with wrap_db_errors("expired_runs"), self._reader.connect() as conn:
            rows = await conn.execute(
                sa.select(runs.c.id).where(LAPSED).order_by(runs.c.created_at)
            )
            return [r.id for r in rows]

    async def prune_steps(
        self, older_than_seconds: float, limit: int, *, status: PrunedStatus = "completed"
    ) -> int:
        """Delete the journals of up to `limit` runs that ended with `status` at least
        `older_than_seconds` ago (by the database's clock); returns how many runs were pruned.

        A completed run's answer, report and ledger rows are elsewhere and stay; its steps are
        only what a replay would need, and a completed run never replays a model call again.
        A failed run's journal is what a resume replays, so the caller gives failed runs a
        longer retention; once pruned, resuming one is refused (`JournalPruned`). Running runs
        keep theirs.

        As `claim_expired` takes runs: one read (no lock) of up to `CANDIDATES_PER_TAKE` times
        `limit` prunable runs, oldest end first, from each shard's partial index; then one
        transaction for the batch that, a thread at a time in an order of this pruner's own,
        marks that thread's runs (those still prunable, skipping any row another pruner holds)
        and deletes their steps by the key prefix (thread_id, run_id). Every statement names
        one thread, so Citus routes each to one shard (it refuses a `FOR UPDATE` across
        shards), and none waits for a lock, so pruners never deadlock. Fewer than `limit`
        pruned: none are left, or other pruners took them."""
        candidates = (
            sa.select(runs.c.thread_id, runs.c.id)
            .where(
                runs.c.status == status,
                runs.c.steps_pruned_at.is_(None),
                runs.c.updated_at < db_now(-older_than_seconds),
            )
            .order_by(runs.c.updated_at)
            .limit(limit * CANDIDATES_PER_TAKE)
        )
        async with wrap_db_errors("prune_steps"), self._reader.connect() as conn:
            found = [(r.thread_id, r.id) for r in await conn.execute(candidates)]
        if not found:
            return 0  # the common sweep: one read, no write transaction
        by_thread: dict[str, list[str]] = {}
        for thread_id, run_id in found:
            by_thread.setdefault(thread_id, []).append(run_id)
        threads = list(by_thread.items())
        shuffle_candidates(threads)
        pruned: list[str] = []
        async with wrap_db_errors("prune_steps"), write_transaction(self._engine) as conn:
            for thread_id, run_ids in threads:
                shuffle_candidates(run_ids)
                while run_ids and len(pruned) < limit:
                    room = limit - len(pruned)
                    batch, run_ids = run_ids[:room], run_ids[room:]
                    pruned += await self._prune_thread(
                        conn, thread_id, batch, status, older_than_seconds
                    )
            if pruned:
                await self._forget(pruned)
        return len(pruned)

    @staticmethod
    async def _prune_thread(
        conn: AsyncConnection,
        thread_id: str,
        run_ids: list[str],
        status: str,
        older_than_seconds: float,
    ) -> list[str]:
        """Mark those of the thread's `run_ids` still prunable and no other transaction holds
        (`SKIP LOCKED`: this never waits, so pruners cannot deadlock), then delete their steps;
        the runs marked. The first write of the batch's transaction is a mark, as a write
        transaction starts with its write (see `write_transaction`)."""
        picked = (
            sa.select(runs.c.id)
            .where(
                runs.c.thread_id == thread_id,
                runs.c.id.in_(run_ids),
                runs.c.status == status,
                runs.c.steps_pruned_at.is_(None),
                runs.c.updated_at < db_now(-older_than_seconds),
            )
            .with_for_update(skip_locked=True)
        )
        mark = (
            runs.update()
            .where(runs.c.thread_id == thread_id, runs.c.id.in_(picked.scalar_subquery()))
            .values(steps_pruned_at=db_now())
            .returning(runs.c.id)
        )
        marked = list((await conn.execute(mark)).scalars())
        if marked:
            await conn.execute(
                run_steps.delete().where(
                    run_steps.c.thread_id == thread_id, run_steps.c.run_id.in_(marked)
                )
            )
        return marked

    async def _forget(self, run_ids: Sequence[str]) -> None:
        """What else holds the pruned runs' journals, deleted inside the pruning transaction:
        if this fails, nothing is marked and the next sweep takes the runs again. The SQL
        journal has nothing else (`DbosRuntime` has its workflows' checkpoints)."""

    async def thread_runs(
        self, thread_id: str, *, limit: int, before_seq: int | None = None
    ) -> list[RunTrace]:
        """The thread's newest runs (`RunTimelineReader`), found through their user messages:
        the `(thread_id, role, seq)` index gives them in order, each run by its primary key. A
        run whose user message is not stored yet (its first checkpoint in flight) is not listed.

        Payloads are read for the steps that say what the model was sent (`load:thread`,
        `history:summarize*`); every other step only by name."""
        async with wrap_db_errors("thread_runs"), self._reader.connect() as conn:
            rows = (await conn.execute(_thread_runs_query(thread_id, limit, before_seq))).all()
            ids = [r.id for r in rows]
            steps = (await conn.execute(_timeline_steps_query(thread_id, ids))).all() if ids else []
        names: dict[str, list[str]] = {}
        payloads: dict[str, dict[str, JsonValue]] = {}
        for step in steps:
            names.setdefault(step.run_id, []).append(step.name)
            if step.payload is not None:
                payloads.setdefault(step.run_id, {})[step.name] = json.loads(step.payload)
        return [_trace(r, names.get(r.id, []), payloads.get(r.id, {})) for r in rows]

    async def steps(self, run_id: str, thread_id: str | None = None) -> list[tuple[str, str]]:
        """(name, payload) of every journaled step, in order: for tests and inspection. With
        `thread_id`, one range of the primary key; without it, a scan of `run_steps`."""
        stmt = sa.select(run_steps.c.name, run_steps.c.payload).where(run_steps.c.run_id == run_id)
        if thread_id is not None:
            stmt = stmt.where(run_steps.c.thread_id == thread_id)
        async with wrap_db_errors("run_steps"), self._reader.connect() as conn:
            rows = await conn.execute(stmt.order_by(run_steps.c.position))
            return [(r.name, r.payload) for r in rows]


def timeline_payloads(steps: Iterable[tuple[str, str]]) -> dict[str, JsonValue]:
    """The decoded payloads of a journal's timeline steps (`is_timeline_step`), by name."""
    return {name: json.loads(payload) for name, payload in steps if is_timeline_step(name)}


def _thread_runs_query(thread_id: str, limit: int, before_seq: int | None) -> sa.Select[Any]:
    """The thread's newest runs by their user messages' seq (below `before_seq`, if given)."""
    found = (
        sa.select(
            messages.c.seq,
            runs.c.id,
            runs.c.status,
            runs.c.created_at,
            runs.c.error_code,
            runs.c.error_message,
            runs.c.report,
            runs.c.steps_pruned_at,
        )
        .join(
            runs,
            sa.and_(runs.c.thread_id == messages.c.thread_id, runs.c.id == messages.c.run_id),
        )
        .where(messages.c.thread_id == thread_id, messages.c.role == "user")
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    if before_seq is not None:
        found = found.where(messages.c.seq < before_seq)
    return found


def _timeline_steps_query(thread_id: str, run_ids: list[str]) -> sa.Select[Any]:
    """Every step of the runs by name, in order; the payload only of the timeline's steps (the
    SQL spelling of `is_timeline_step`)."""
    wanted = sa.or_(run_steps.c.name == LOAD_THREAD, run_steps.c.name.like(HISTORY_PREFIX + "%"))
    return (
        sa.select(
            run_steps.c.run_id,
            run_steps.c.name,
            sa.case((wanted, run_steps.c.payload), else_=None).label("payload"),
        )
        .where(run_steps.c.thread_id == thread_id, run_steps.c.run_id.in_(run_ids))
        .order_by(run_steps.c.run_id, run_steps.c.position)
    )


def _trace(row: Any, names: list[str], payloads: dict[str, JsonValue]) -> RunTrace:
    created = row.created_at
    return RunTrace(
        run_id=row.id,
        status=row.status,
        seq=row.seq,
        created_at=created.replace(tzinfo=UTC) if created.tzinfo is None else created,
        error_code=row.error_code,
        error_message=row.error_message,
        report=json.loads(row.report) if row.report else None,
        steps=names,
        payloads=payloads,
        pruned=row.steps_pruned_at is not None,
    )
