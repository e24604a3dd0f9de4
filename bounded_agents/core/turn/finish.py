"""The end of a run: the answer stored with the run's end, the report finished."""

from __future__ import annotations

import logging

from bounded_agents.core.checkpoints import PERSIST_ASSISTANT, encode_payload, parse_seq
from bounded_agents.core.messages import Message
from bounded_agents.core.ports import JsonValue, Transaction, supports_journal_figures
from bounded_agents.core.report import LedgerRow, prompt_cache_report
from bounded_agents.core.turn.deps import TurnDeps
from bounded_agents.core.turn.load import persist
from bounded_agents.core.turn.spend import ledger_row
from bounded_agents.core.turn.state import Digest, Turn
from bounded_agents.errors import AgentError, StoreError

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


async def store_answer(
    deps: TurnDeps, turn: Turn, answer: Message, *, digest: Digest | None = None
) -> Message:
    """Store the answer and end the run, in one transaction when the writers share one: a run
    is then never `running` beside its stored answer, and a commit that fails stores neither.
    If the database refuses that transaction, the answer is stored on its own (the client paid
    for it) and the runtime records the end when it can: it retries, and a `SqlJournal`
    records it before refusing the next turn on the thread."""
    ctx, report, run_id = turn.ctx, turn.report, turn.request.run_id
    report.status = "completed"
    ended: list[bool] = []
    # A resumed run reports every attempt's ledger rows: those committed, read now, and those
    # this attempt books from here on (its last model step's, in the answer's transaction).
    committed = None if turn.fresh else (await _ledger_rows(deps, run_id), len(report.ledger))

    async def store(tx: Transaction | None) -> JsonValue:
        return await persist(deps, turn, answer, tx=tx, digest=digest)

    async def store_and_end(tx: Transaction | None) -> JsonValue:
        stored = await store(tx)
        if tx is not None:  # the run's end rides in the answer's transaction
            if committed is not None:
                rows, mark = committed
                report.ledger = [*rows, *report.ledger[mark:]] if rows is not None else []
            await finish_report(
                deps, turn, writing=(PERSIST_ASSISTANT, stored), read=committed is None
            )
            await deps.runtime.complete(run_id, report.model_dump(mode="json"), tx=tx)
            ended.append(True)
        return stored

    try:
        async with ctx.unit_of_work():
            stored = await ctx.step(
                PERSIST_ASSISTANT, store_and_end, writes=deps.shares_transactions
            )
    except StoreError:
        if not deps.shares_transactions:
            raise
        log.warning("run %s: the answer and the run's end failed to commit", run_id)
        ended.clear()
        async with ctx.unit_of_work():  # only the answer again
            stored = await ctx.step(PERSIST_ASSISTANT, store)
    if not ended:
        await finish_report(deps, turn)
        try:
            await deps.runtime.complete(run_id, report.model_dump(mode="json"))
        except AgentError:
            # The answer is stored: the client gets it; the end is recorded later.
            log.warning("run %s: answered, but its end could not be recorded yet", run_id)
    return answer.model_copy(update={"seq": parse_seq(stored)["seq"]})


async def finish_report(
    deps: TurnDeps,
    turn: Turn,
    *,
    writing: tuple[str, JsonValue] | None = None,
    read: bool = True,
) -> None:
    """The report's journal and cache figures, and its ledger rows: a fresh run's were
    collected as they were written; a resumed run reads them back, since an earlier attempt
    may have paid for calls this one replayed (unless `read` is False: the caller filled them).
    `writing`: a step being written now, whose bytes the journal does not count yet (the
    answer's, when the run ends in its write)."""
    report, ctx = turn.report, turn.ctx
    figures = ctx.journal_bytes if supports_journal_figures(ctx) else None  # probed once
    report.journal_bytes = dict(figures) if figures is not None else {}
    if writing is not None and figures is not None:
        name, value = writing
        report.journal_bytes[name] = len(encode_payload(value).encode())
    report.prompt_cache = prompt_cache_report(report.model_calls)
    if turn.fresh or not read:
        return
    rows = await _ledger_rows(deps, report.run_id)
    report.ledger = rows if rows is not None else []


async def _ledger_rows(deps: TurnDeps, run_id: str) -> list[LedgerRow] | None:
    """The run's committed ledger rows, every attempt's; None when they cannot be read (the
    report then lists none: this attempt's rows alone would pass for the whole run's)."""
    try:
        entries = await deps.raw_ledger.entries_for_run(run_id)
    except AgentError:
        log.warning("run %s: ledger rows unavailable for its report", run_id)
        return None
    return [ledger_row(e) for e in entries]


__all__ = ["finish_report", "store_answer"]
