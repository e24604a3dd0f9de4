"""A process that starts one turn and stops inside the turn's first unit of work, for
`test_first_unit_kill.py` to kill with SIGKILL.

`python -m tests.reliability.first_unit_child DATABASE_URL THREAD_ID RUN_ID` runs the real loop
(SQL store, SQL journal, SQL ledger, the offline model) on the thread. When the turn read runs
inside the first unit (the run's row and the user's message are written, not committed), it
prints `IN-FIRST-UNIT` and waits there for good.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from bounded_agents.core.history import window_history
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.ports import ThreadTurnPage, ThreadTurnQuery
from bounded_agents.durable.journal import SqlJournal
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger

READY = "IN-FIRST-UNIT"


class PausingStore(SqlAgentStore):
    """The SQL store, stopping for good at the turn read of a first unit."""

    async def load_thread_for_turn(
        self, query: ThreadTurnQuery, *, tx: Any = None
    ) -> ThreadTurnPage | None:
        if tx is not None:
            print(READY, flush=True)
            await asyncio.Event().wait()
        return await super().load_thread_for_turn(query, tx=tx)


async def main(url: str, thread_id: str, run_id: str) -> None:
    store = PausingStore.from_url(url)
    definition = AgentDefinition(
        name="helper", system_prompt="You help.", policy=window_history(max_messages=10)
    )
    loop = AgentLoop(
        store=store,
        runtime=SqlJournal(store.engine, lease_seconds=60),
        ledger=SqlLedger(store.engine),
        model=EchoModel(),
        agents={"helper": definition},
    )
    await loop.run_turn(
        agent="helper", thread_id=thread_id, actor_id="alice", content="killed", run_id=run_id
    )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
