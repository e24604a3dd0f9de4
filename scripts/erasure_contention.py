"""What an erasure loop costs another actor on SQLite (issue 40, break 7), measured.

A SQLite database of `--messages` messages (100 threads, words from a 5,000-word vocabulary,
so the FTS5 index is the size a real one is), then one actor's turns (`AgentLoop`, the Echo
model, a window of 20) timed alone, then timed again while another actor erases messages of its
own thread one after another. Prints each phase's turn median and p95 and the erasures' median
and count, as JSON.

    PYTHONPATH=. .venv/bin/python -m scripts.erasure_contention --messages 100000 --seconds 20

The script uses only the store's and the loop's public calls, so it runs on a tree before
this change too (`PYTHONPATH=<that tree>`): that is the "before" figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bounded_agents.core.history import HistoryConfig, policy_from_config
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.messages import Message
from bounded_agents.durable import SqlJournal
from bounded_agents.providers.echo import EchoModel
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.ledger import SqlLedger

THREADS = 100


def _words(rng: random.Random, vocabulary: list[str], n: int) -> str:
    return " ".join(rng.choice(vocabulary) for _ in range(n))


async def _fill(store: SqlAgentStore, total: int, rng: random.Random) -> None:
    vocabulary = [f"w{i}x{rng.randrange(10**6)}" for i in range(5_000)]
    per = total // THREADS
    for _ in range(THREADS):
        thread = await store.create_thread(actor_id="filler", agent="bench")
        batch = [
            Message(role="user" if i % 2 == 0 else "assistant", content=_words(rng, vocabulary, 20))
            for i in range(per)
        ]
        for start in range(0, per, 1_000):
            await store.append_messages(thread.id, batch[start : start + 1_000])


async def _turns(loop: AgentLoop, thread_id: str, stop: asyncio.Event, out: list[float]) -> None:
    i = 0
    while not stop.is_set():
        started = time.perf_counter()
        await loop.run_turn(
            agent="bench",
            thread_id=thread_id,
            actor_id="bob",
            content=f"turn {i} hello",
            run_id=str(uuid.uuid4()),
        )
        out.append(time.perf_counter() - started)
        i += 1


async def _erase(
    store: SqlAgentStore, thread_id: str, seqs: list[int], stop: asyncio.Event, out: list[float]
) -> None:
    for seq in seqs:
        if stop.is_set():
            return
        started = time.perf_counter()
        await store.delete_message(thread_id, seq)
        out.append(time.perf_counter() - started)
        await asyncio.sleep(0)


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(values),
        "median_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


async def main(messages: int, seconds: float, directory: Path) -> dict[str, Any]:
    rng = random.Random(7)
    url = f"sqlite+aiosqlite:///{directory / 'contention.db'}"
    store = SqlAgentStore.from_url(url)
    await store.create_schema()
    began = time.perf_counter()
    await _fill(store, messages, rng)
    filled = time.perf_counter() - began
    definition = AgentDefinition(
        name="bench",
        system_prompt="You help.",
        policy=policy_from_config(HistoryConfig.coerce({"max_messages": 20}), EchoModel()),
    )
    loop = AgentLoop(
        store=store,
        runtime=SqlJournal(store.engine, lease_seconds=60),
        ledger=SqlLedger(store.engine),
        model=EchoModel(),
        agents={"bench": definition},
    )
    turner = await store.create_thread(actor_id="bob", agent="bench")
    victim = await store.create_thread(actor_id="alice", agent="bench")
    await store.append_messages(
        victim.id,
        [Message(role="user", content=f"erase me {i} gone{i}x") for i in range(1, 2_001)],
    )

    alone: list[float] = []
    stop = asyncio.Event()
    task = asyncio.create_task(_turns(loop, turner.id, stop, alone))
    await asyncio.sleep(seconds / 2)
    stop.set()
    await task

    during: list[float] = []
    erasures: list[float] = []
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(_turns(loop, turner.id, stop, during)),
        asyncio.create_task(_erase(store, victim.id, list(range(1, 2_001)), stop, erasures)),
    ]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    await store.dispose()
    residue = _vocabulary(directory / "contention.db") & {f"gone{i}x" for i in range(1, 2_001)}
    erased = {f"gone{i}x" for i in range(1, len(erasures) + 1)}
    return {
        "messages": messages,
        "fill_seconds": round(filled, 1),
        "turns_alone": _summary(alone),
        "turns_during_erasures": _summary(during),
        "erasures": _summary(erasures),
        "erasures_per_second": round(len(erasures) / seconds, 2),
        "erased_terms_left_in_fts_vocabulary": len(residue & erased),
        "unerased_terms_in_fts_vocabulary": len(residue - erased),
    }


def _vocabulary(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, messages_fts, row)")
        return {r[0] for r in conn.execute("SELECT term FROM temp.v WHERE term LIKE 'gone%'")}
    finally:
        conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(asyncio.run(main(args.messages, args.seconds, Path(tmp))), indent=2))
