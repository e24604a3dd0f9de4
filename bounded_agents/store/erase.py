"""Erasure (the right to erasure): a message, or a whole thread, gone from every table.

Where a message's bytes can be, and what becomes of each:

- `messages`: its row is deleted. Its `seq` is never handed out again (`threads.last_seq` stays),
  so an id a client saw never names another message; the thread's seqs have a gap from now on,
  which every bounded read tolerates (a count window over the gap shows one message fewer, a
  token window counts the erased message's tokens still: both stay within their bound).
- `thread_summaries`: every summary with `covers_through_seq >= seq` folded it in (a summary
  rolls up the one before it), so all of them are deleted. The newest summary left ends before
  the message; the next turns' fold rules fold the span after it again from the messages left,
  `fold_calls_per_turn` summarizer calls a turn, as any backlog.
- `run_steps`: the journal of EVERY run of the thread is deleted and the runs are marked pruned
  (`steps_pruned_at`), as retention would. Which steps hold the message is not written anywhere
  a statement can see: the run that stored it journals it, every later run's `load:thread` may
  hold it in its fold (and in its window, in journals written before the window was journaled
  by seq), and a fold's summary text may quote it. Reading the payloads to
  find them would be slow and fragile; a finished run's journal is only there to replay a crash
  (and for the timeline), and a pruned run already answers that it cannot be replayed. The
  runs' rows stay (their report and status hold no content) except for one field:
- `runs.request`: the run whose user message it is keeps the content in its request, which is
  blanked (`content: ""`).
- later answers' `search_history` results (`messages.tool_results`): a search made after the
  message was written may have quoted it, and a quote is a copy the next prompts, the views
  and the Conversations items show. Every row of such a result that quotes the message
  (`bounded_agents.core.erasure`) keeps its seq and role, its text becomes `[erased]`. Bounded:
  one statement reads only the thread's messages after the erased seq (a range of the primary
  key) that hold a `search_history` call, filtered in the database; each row it returns costs
  one JSON parse, and those that quoted the message are rewritten by one executemany. Those
  answers' journals (their `tool:` steps hold the same result) are among the thread's steps
  deleted above.
- the search index (migration 0012): on PostgreSQL a column of the row, gone with it. On
  SQLite the FTS5 index is told by the delete trigger which terms the row held (FTS5's
  'delete', per row, in the erasure's transaction: the index no longer finds it). FTS5 keeps
  a deleted row's terms in its older segments until a merge reaches them (a delete appends a
  tombstone; SQLite 3.40 has no `secure-delete`), so after the commit `scrub_search_index`
  merges the index into one segment in steps of `SCRUB_PAGES` pages, each its own short write
  transaction: other writers (another actor's turn) get the write lock between steps, where
  the whole-index `optimize` this used to run held it for the whole merge (0.16-0.20 s at
  100,000 messages, issue 40). The erasure returns when the scrub is done. A process that dies
  between the commit and the end of the scrub leaves terms in segments until the next
  erasure's scrub (or `scrub_search_index` run by hand) merges them.
- `summary_archive`: every archived summary part covering the seq (`from_seq <= seq <=
  to_seq`) is deleted: its notes may quote the message. A thread's erasure deletes them all.
- `runs.error_message` of the thread's failed runs: a provider that refuses a request may quote
  it in its error (a validating server echoes the input it refused), and the prompt of any run
  after the message may have held it (window, summary, search result), so every failed run of
  the thread loses the text after the part the project wrote itself (`provider returned HTTP
  400`: `bounded_agents.core.erasure.redact_error`); the code stays. Bounded by the thread's
  runs: one read of its failed ones, one executemany of the rewrites. Chosen over never storing
  the provider's text because that text is what tells an operator why a provider refused (a
  bad parameter, a model name), and it is kept only until an erasure asks for it to go; spans
  never record it unless content capture is on (`bounded_agents.observability`).
- `threads.last_prompt`: a digest of the last prompt (hashes, not text), cleared all the same:
  the next turn only loses its `prefix_reused` figure.

At the storage layer (SQLite): every connection runs with `secure_delete` on, so the pages a
delete frees are zeroed, and once an erasure commits, `PRAGMA wal_checkpoint(TRUNCATE)` copies
the WAL into the database and truncates the `-wal` file, which otherwise keeps every page as it
was written (the erased text among them) until the WAL wraps. The checkpoint takes this
process's writer turn and waits for readers as a write does (the busy timeout); a reader of
another process holding an old snapshot past that leaves the WAL for the next checkpoint, and
the erasure logs a warning. PostgreSQL keeps dead tuples and old index entries until a table
rewrite, and WAL until it is recycled: docs/http-api.md ("Erasure") says what and the commands.

A live run (running, lease not lapsed) may be holding the message in memory and about to write a
summary of it, so an erasure refuses with `ThreadBusy` (409) while one holds the thread; the
thread's row is locked first, so no run can begin or append between that check and the commit.
A run whose lease lapsed is dead: it is failed for good (its journal is gone).

Every statement names the thread: on Citus each one is routed to the thread's shard. A runtime
that keeps run records of its own (DBOS: workflows and step outputs in its system database) is
erased by the route after the store (`bounded_agents.http.erase`, the `RunEraser` power).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bounded_agents.core.erasure import redact_error, redact_search_results
from bounded_agents.core.messages import (
    decode_tool_calls,
    decode_tool_results,
    encode_json_list,
    row_digest,
)
from bounded_agents.core.search import SEARCH_TOOL_NAME
from bounded_agents.errors import ThreadBusy
from bounded_agents.store.clock import db_now
from bounded_agents.store.dialect import dialect_of
from bounded_agents.store.engine import acquire_writer, on_citus, write_transaction
from bounded_agents.store.errors import wrap_db_errors
from bounded_agents.store.schema import (
    erased_threads,
    messages,
    run_steps,
    runs,
    summary_archive,
    thread_summaries,
    threads,
)
from bounded_agents.store.search import ARCHIVE_FTS_TABLE, FTS_TABLE

log = logging.getLogger("bounded_agents.store.erase")

_TID = sa.bindparam("tid", type_=sa.String)
_SEQ = sa.bindparam("seq", type_=sa.Integer)

_TAKE = threads.update().where(threads.c.id == _TID).values(updated_at=threads.c.updated_at)
"""SQLite: the erasure's first statement, a write that changes nothing, so the database's write
lock is taken at once (see `write_transaction`); no row means no thread."""
_LOCK = sa.select(threads.c.id).where(threads.c.id == _TID).with_for_update()
"""PostgreSQL: the erasure's first statement, the thread row's strongest lock, which a run's
insert (its foreign key's KEY SHARE lock) and an append (its seq bump) both wait for, and which
waits for theirs. First, before any other lock of the row: a weaker lock taken first (an
UPDATE's) would deadlock with a turn holding KEY SHARE and about to bump the seq."""
_LIVE_RUN = (
    sa.select(runs.c.id)
    .where(
        runs.c.thread_id == _TID,
        runs.c.status == "running",
        sa.or_(runs.c.lease_expires_at.is_(None), runs.c.lease_expires_at >= db_now()),
    )
    .limit(1)
)
_MESSAGE = sa.select(
    messages.c.role, messages.c.run_id, messages.c.content, messages.c.attachments
).where(messages.c.thread_id == _TID, messages.c.seq == _SEQ)
_DELETE_MESSAGE = messages.delete().where(messages.c.thread_id == _TID, messages.c.seq == _SEQ)
_DELETE_COVERING = thread_summaries.delete().where(
    thread_summaries.c.thread_id == _TID, thread_summaries.c.covers_through_seq >= _SEQ
)
_DELETE_ARCHIVED = summary_archive.delete().where(
    summary_archive.c.thread_id == _TID,
    summary_archive.c.from_seq <= _SEQ,
    summary_archive.c.to_seq >= _SEQ,
)
_DELETE_STEPS = run_steps.delete().where(run_steps.c.thread_id == _TID)
_FAIL_LAPSED = (
    runs.update()
    .where(runs.c.thread_id == _TID, runs.c.status == "running")
    .values(
        status="failed",
        error_code="journal_erased",
        error_message="the run's process stopped, and an erasure deleted its journal",
        lease_expires_at=None,
    )
)
_MARK_PRUNED = (
    runs.update()
    .where(runs.c.thread_id == _TID, runs.c.steps_pruned_at.is_(None))
    .values(steps_pruned_at=sa.func.current_timestamp())
)
_RID = sa.bindparam("rid", type_=sa.String)
_REQUEST = sa.select(runs.c.request).where(runs.c.thread_id == _TID, runs.c.id == _RID)
_SET_REQUEST = (
    runs.update()
    .where(runs.c.thread_id == _TID, runs.c.id == _RID)
    .values(request=sa.bindparam("request", type_=sa.Text))
)
_SEARCHED_AFTER = sa.select(messages.c.seq, messages.c.tool_calls, messages.c.tool_results).where(
    messages.c.thread_id == _TID,
    messages.c.seq > _SEQ,
    messages.c.tool_results.is_not(None),
    messages.c.tool_calls.contains(f'"name":"{SEARCH_TOOL_NAME}"', autoescape=True),
)
"""The thread's later answers that called `search_history` (a tool call's JSON, as
`encode_json_list` writes it, holds `"name":"search_history"`; a false positive is only parsed)."""
_SET_RESULTS = (
    messages.update()
    .where(messages.c.thread_id == _TID, messages.c.seq == sa.bindparam("at", type_=sa.Integer))
    .values(tool_results=sa.bindparam("results", type_=sa.Text))
)
_FAILED = sa.select(runs.c.id, runs.c.error_code, runs.c.error_message).where(
    runs.c.thread_id == _TID, runs.c.status == "failed", runs.c.error_message.is_not(None)
)
_SET_ERROR = (
    runs.update()
    .where(runs.c.thread_id == _TID, runs.c.id == _RID)
    .values(error_message=sa.bindparam("message", type_=sa.Text))
)
_FORGET_PROMPT = (
    threads.update().where(threads.c.id == _TID).values(last_prompt=None, last_reported_tokens=None)
)
_OWNER = sa.select(threads.c.actor_id).where(threads.c.id == _TID)
"""What of an erased thread stays is its id and owner (`erased_threads`, which a keyed retry's
`create_named_thread(..., unless_erased=True)` reads), kept by a plain INSERT of both: an
INSERT ... SELECT from `threads` would be one statement, but Citus runs it as a pushdown that
names no shard key, where an INSERT of values is routed to the thread's shard like every other
statement of the erasure (tests/store/test_citus_routing.py)."""
_DELETE_THREAD = (
    run_steps.delete().where(run_steps.c.thread_id == _TID),
    runs.delete().where(runs.c.thread_id == _TID),
    thread_summaries.delete().where(thread_summaries.c.thread_id == _TID),
    summary_archive.delete().where(summary_archive.c.thread_id == _TID),
    messages.delete().where(messages.c.thread_id == _TID),
    threads.delete().where(threads.c.id == _TID),
)
"""Children first, each by the thread: no reliance on foreign-key cascades (SQLite enforces them
only with its pragma on, and each cascade would be a statement the thread does not route)."""


async def delete_thread(engine: AsyncEngine, thread_id: str) -> bool:
    """The thread and all of it but its ledger rows and its id (`erased_threads`), in one
    transaction; False when unknown. An id erased before (a thread a caller named, made again
    and erased again) is dated, and owned, by its latest erasure: the retention counts from it."""
    params = {"tid": thread_id}
    async with wrap_db_errors("delete_thread"), write_transaction(engine) as conn:
        if not await _take(conn, params):
            return False
        owner = (await conn.execute(_OWNER, params)).scalar_one()
        keep_id = dialect_of(conn).insert(erased_threads).values(id=thread_id, actor_id=owner)
        await conn.execute(
            keep_id.on_conflict_do_update(
                index_elements=[erased_threads.c.id],
                set_={"actor_id": owner, "erased_at": keep_id.excluded.erased_at},
            )
        )
        for statement in _DELETE_THREAD:
            await conn.execute(statement, params)
    await scrub_search_index(engine)
    await checkpoint_erasure(engine)
    return True


async def prune_erased(engine: AsyncEngine, older_than_seconds: float, limit: int) -> int:
    """Delete up to `limit` rows of `erased_threads` kept at least `older_than_seconds` (by the
    database's clock), oldest first; returns how many went.

    The row is what lets a keyed `/v1` retry be refused after its conversation was deleted, and
    it holds the owner's id: personal data kept after an erasure, so only for a while
    (AGENT_ERASED_THREAD_RETENTION_SECONDS). Past it, a retry of the erased conversation's key
    starts the conversation again, as a new request would. One read of the oldest ids (the
    `erased_at` index), then one DELETE of those still old enough: a row another sweep took
    meanwhile is simply not counted. On Citus (the table is distributed by id) one DELETE per
    id, each its own transaction routed to one shard: one DELETE of many ids would be a
    transaction across workers, and two processes' sweeps could deadlock across them."""
    old = erased_threads.c.erased_at < db_now(-older_than_seconds)
    oldest = (
        sa.select(erased_threads.c.id).where(old).order_by(erased_threads.c.erased_at).limit(limit)
    )
    async with wrap_db_errors("prune_erased"):
        async with engine.connect() as conn:
            ids = list((await conn.execute(oldest)).scalars())
        if not ids:
            return 0  # the common sweep: one read, no write transaction
        if on_citus(engine):
            one = erased_threads.delete().where(erased_threads.c.id == sa.bindparam("tid"), old)
            gone = 0
            for thread_id in ids:
                async with write_transaction(engine) as conn:
                    gone += (await conn.execute(one, {"tid": thread_id})).rowcount
            return gone
        delete = erased_threads.delete().where(erased_threads.c.id.in_(ids), old)
        async with write_transaction(engine) as conn:
            return (await conn.execute(delete)).rowcount


async def delete_message(
    engine: AsyncEngine, thread_id: str, seq: int, *, digest: str | None = None
) -> bool:
    """The message `seq` and every trace of it (see the module docstring), in one transaction;
    False when the thread has no such message, or (with `digest`) when the row there is not
    the one the caller read (nothing is changed then)."""
    params: dict[str, Any] = {"tid": thread_id, "seq": seq}
    async with wrap_db_errors("delete_message"), write_transaction(engine) as conn:
        if not await _take(conn, params):
            return False
        found = (await conn.execute(_MESSAGE, params)).one_or_none()
        if found is None:
            return False
        if digest is not None and digest != row_digest(
            seq, found.role, found.content, found.attachments
        ):
            return False
        await conn.execute(_DELETE_MESSAGE, params)
        await conn.execute(_DELETE_COVERING, params)
        await _erase_search_quotes(conn, params)
        await conn.execute(_DELETE_ARCHIVED, params)
        await conn.execute(_DELETE_STEPS, params)
        await conn.execute(_FAIL_LAPSED, params)
        await conn.execute(_MARK_PRUNED, params)
        await _redact_errors(conn, params)
        if found.role == "user" and found.run_id is not None:
            await _blank_request(conn, {**params, "rid": found.run_id})
        await conn.execute(_FORGET_PROMPT, params)
    await scrub_search_index(engine)
    await checkpoint_erasure(engine)
    return True


_CHECKPOINT = sa.text("PRAGMA wal_checkpoint(TRUNCATE)")


async def checkpoint_erasure(engine: AsyncEngine) -> bool:
    """SQLite: after an erasure committed, move the WAL into the database and truncate the
    `-wal` file, so the pages as they were before the erasure leave the files (see the module
    docstring). False when a reader kept the WAL from being emptied (logged); True otherwise,
    and on PostgreSQL, which has nothing to do here."""
    if not dialect_of(engine).sqlite:
        return True
    lock = await acquire_writer(engine)
    try:
        async with wrap_db_errors("checkpoint_erasure"), engine.connect() as conn:
            busy = (await conn.execute(_CHECKPOINT)).scalar_one()
    finally:
        if lock is not None:
            lock.release()
    if busy:
        log.warning(
            "the WAL checkpoint after an erasure was blocked by a reader: erased bytes stay in "
            "the -wal file until the next checkpoint"
        )
    return not busy


SCRUB_PAGES = 64
"""Pages one scrub step of FTS5's 'merge' writes at most (about 256 KB at 4 KB pages): the
longest another writer waits for the lock behind a step."""


_FTS_EXISTS = sa.text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name")
_TOTAL_CHANGES = sa.text("SELECT total_changes()")


async def scrub_search_index(engine: AsyncEngine) -> int:
    """SQLite: merge each FTS5 index into one segment, `SCRUB_PAGES` pages per write
    transaction, so no segment still holds an erased row's terms (see the module docstring);
    returns the steps taken. PostgreSQL, or a database without the index: nothing to do.

    FTS5's `('merge', -N)` writes at most about N pages, merging segments of every level
    together, and an incremental merge it starts goes on in the next steps until its output
    is written; it did work when `total_changes()` grew by 2 or more (FTS5's documented
    test). When the index is one segment it does none: the tombstones went with the merge
    that included the oldest segment. Writers that keep adding segments (other actors' turns,
    one each) would keep it working forever, so the steps are bounded too: twice the index's
    leaf pages at the start over N, plus 4, enough for the merge that holds every segment
    present at the start (the ones holding the erased terms) to finish."""
    if not dialect_of(engine).sqlite:
        return 0
    steps = 0
    for fts in (FTS_TABLE, ARCHIVE_FTS_TABLE):
        merge = sa.text(f"INSERT INTO {fts}({fts}, rank) VALUES ('merge', {-SCRUB_PAGES})")
        async with wrap_db_errors("scrub_search_index"), engine.connect() as conn:
            if (await conn.execute(_FTS_EXISTS, {"name": fts})).first() is None:
                continue
            pages = (await conn.execute(sa.text(f"SELECT count(*) FROM {fts}_data"))).scalar()
        for _ in range(2 * (int(pages or 0) // SCRUB_PAGES + 1) + 4):
            async with wrap_db_errors("scrub_search_index"), write_transaction(engine) as conn:
                before = (await conn.execute(_TOTAL_CHANGES)).scalar_one()
                await conn.execute(merge)
                worked = (await conn.execute(_TOTAL_CHANGES)).scalar_one() - before >= 2
            steps += 1
            if not worked:
                break
    return steps


async def _erase_search_quotes(conn: AsyncConnection, params: dict[str, Any]) -> None:
    """Rewrite the later `search_history` results that quoted the message (see the module
    docstring): one read of the candidates, one UPDATE (an executemany) of those that quoted it."""
    seq = int(params["seq"])
    rewritten: list[dict[str, Any]] = []
    for row in (await conn.execute(_SEARCHED_AFTER, params)).all():
        redacted = redact_search_results(
            decode_tool_calls(row.tool_calls), decode_tool_results(row.tool_results), seq
        )
        if redacted is not None:
            # Only this statement's parameters: an UPDATE takes any other key that names a
            # column (`seq`!) as one more value to SET.
            rewritten.append(
                {"tid": params["tid"], "at": row.seq, "results": encode_json_list(redacted)}
            )
    if rewritten:
        await conn.execute(_SET_RESULTS, rewritten)  # one executemany


async def _redact_errors(conn: AsyncConnection, params: dict[str, Any]) -> None:
    """Every failed run of the thread without the text an error may have echoed (see the
    module docstring)."""
    redacted = [
        {"tid": params["tid"], "rid": row.id, "message": text}
        for row in (await conn.execute(_FAILED, params)).all()
        if (text := redact_error(row.error_code or "", row.error_message)) is not None
    ]
    if redacted:
        await conn.execute(_SET_ERROR, redacted)  # one executemany


async def _take(conn: AsyncConnection, params: dict[str, Any]) -> bool:
    """Lock the thread for the erasure; False when there is no thread, `ThreadBusy` when a live
    run holds it."""
    if dialect_of(conn).postgres:
        found = (await conn.execute(_LOCK, params)).first() is not None
    else:
        found = (await conn.execute(_TAKE, params)).rowcount > 0
    if not found:
        return False
    if (await conn.execute(_LIVE_RUN, params)).first() is not None:
        raise ThreadBusy(str(params["tid"]))
    return True


async def _blank_request(conn: AsyncConnection, params: dict[str, Any]) -> None:
    """The run's request without the erased content; its other members as they were, so a
    resume (refused anyway: the journal is pruned) still reads it."""
    text = (await conn.execute(_REQUEST, params)).scalar_one_or_none()
    if text is None:
        return
    request = json.loads(text)
    request["content"] = ""
    await conn.execute(_SET_REQUEST, {**params, "request": json.dumps(request)})


__all__ = [
    "SCRUB_PAGES",
    "checkpoint_erasure",
    "delete_message",
    "delete_thread",
    "scrub_search_index",
]
