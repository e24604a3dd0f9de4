"""One process of the two-process append test: `python -m tests.integrations.appender URL
SESSION TAG BATCHES` appends BATCHES batches of 20 items tagged TAG to the session once a line
arrives on stdin, so the test starts both processes writing together."""

from __future__ import annotations

import asyncio
import sys

from bounded_agents.integrations.openai_agents import BoundedSession
from bounded_agents.store import SqlAgentStore


async def main(url: str, session_id: str, tag: str, batches: int) -> None:
    store = SqlAgentStore.from_url(url)
    session = BoundedSession(session_id, store)
    await session.history.ensure_thread()
    print("ready", flush=True)
    sys.stdin.readline()  # the test's go: both processes start writing together
    for b in range(batches):
        items = [{"type": "x", "tag": tag, "batch": b, "i": i} for i in range(20)]
        await session.add_items(items)  # type: ignore[arg-type]
    await store.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
