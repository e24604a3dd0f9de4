"""The end of a run: the answer stored with the run's end, the report finished."""

from __future__ import annotations

import functools
import logging

from bounded_agents.core.checkpoints import PERSIST_ASSISTANT, parse_seq
from bounded_agents.core.messages import (
    Message,
)
from bounded_agents.core.ports import (
    DurableContext,
    RunRequest,
    supports_journal_figures,
)
from bounded_agents.core.report import (
    RunReport,
    prompt_cache_report,
)
from bounded_agents.core.turn.prompts import (
    _ledger_row,
)
from bounded_agents.core.turn.state import (
    _Digest,
)
from bounded_agents.core.turn.steps import StepsPhase
from bounded_agents.errors import (
    AgentError,
    StoreError,
)

log = logging.getLogger("bounded_agents.core.loop")
"""The loop's one logger, whichever turn module logs: log configuration keeps working."""


class FinishPhase(StepsPhase):
    async def _store_answer(
        self,
        request: RunRequest,
        ctx: DurableContext,
        answer: Message,
        report: RunReport,
        fresh: bool,
        digest: _Digest | None = None,
    ) -> Message:
        """Store the answer and end the run, in one transaction when the writers share one:
        a run is then never `running` beside its stored answer, and a commit that fails stores
        neither. If the database refuses that transaction, the answer is stored on its own (the
        client paid for it) and the runtime records the end when it can: it retries, and a
        `SqlJournal` records it before refusing the next turn on the thread."""
        report.status = "completed"
        persist = functools.partial(self._persist, ctx, request.thread_id, answer, digest)
        ended = False
        try:
            async with ctx.unit_of_work():
                stored = await ctx.step(PERSIST_ASSISTANT, persist)
                await self._finish_report(ctx, report, fresh)
                tx = await self._tx(ctx)
                if tx is not None:
                    await self.runtime.complete(
                        request.run_id, report.model_dump(mode="json"), tx=tx
                    )
                    ended = True
        except StoreError:
            if not self._shares_transactions:
                raise
            log.warning("run %s: the answer and the run's end failed to commit", request.run_id)
            async with ctx.unit_of_work():  # the report is finished: only the answer again
                stored = await ctx.step(PERSIST_ASSISTANT, persist)
        if not ended:
            try:
                await self.runtime.complete(request.run_id, report.model_dump(mode="json"))
            except AgentError:
                # The answer is stored: the client gets it; the end is recorded later.
                log.warning(
                    "run %s: answered, but its end could not be recorded yet", request.run_id
                )
        return answer.model_copy(update={"seq": parse_seq(stored)["seq"]})

    async def _finish_report(self, ctx: DurableContext, report: RunReport, fresh: bool) -> None:
        """A fresh run's ledger rows were collected as they were written; a resumed run reads
        them back, since an earlier attempt may have paid for calls this one replayed."""
        report.journal_bytes = dict(ctx.journal_bytes) if supports_journal_figures(ctx) else {}
        report.prompt_cache = prompt_cache_report(report.model_calls)
        if fresh:
            return
        try:
            entries = await self.ledger.entries_for_run(report.run_id)
        except AgentError:
            log.warning("run %s: ledger rows unavailable for its report", report.run_id)
            report.ledger = []  # this attempt's rows alone would pass for the whole run's
            return
        report.ledger = [_ledger_row(e) for e in entries]
