"""InlineRuntime remembers a bounded amount (attack round 5: it kept every request's text for
the life of the process): a run's text is dropped when it ends, only `MAX_ENDED_RUNS` ended
runs are remembered (their keys with them), and a thread erased whole takes its runs along."""

from __future__ import annotations

import pytest

from bounded_agents.core.ports import Idempotency, RunRequest
from bounded_agents.durable import InlineRuntime, inline


def _request(n: int, thread: str = "t") -> RunRequest:
    return RunRequest(
        run_id=f"r{n}",
        thread_id=f"{thread}{n}",
        actor_id="a",
        agent="x",
        content="x" * 1000,
        idempotency=Idempotency(key=f"k{n}", fingerprint="f"),
    )


async def test_a_runs_text_is_dropped_when_it_ends() -> None:
    runtime = InlineRuntime()
    await runtime.begin(_request(1))
    running = await runtime.get_run("r1")
    assert running is not None and running.request.content == "x" * 1000

    await runtime.complete("r1", {"status": "completed"})

    ended = await runtime.get_run("r1")
    assert ended is not None and ended.status == "completed" and ended.request.content == ""


async def test_only_the_newest_ended_runs_are_remembered_with_their_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inline, "MAX_ENDED_RUNS", 3)
    runtime = InlineRuntime()
    await runtime.begin(_request(0))  # still running: never forgotten
    for n in range(1, 6):
        await runtime.begin(_request(n))
        if n % 2:
            await runtime.fail(f"r{n}", "provider_error", "down", {})
        else:
            await runtime.complete(f"r{n}", {})

    remembered = [n for n in range(6) if await runtime.get_run(f"r{n}") is not None]
    assert remembered == [0, 3, 4, 5]
    assert await runtime.find_keyed_run("t1", "a", "k1") is None
    assert await runtime.find_keyed_run("t5", "a", "k5") == ("r5", "f")


async def test_a_thread_erased_whole_takes_its_runs_and_keys() -> None:
    runtime = InlineRuntime()
    await runtime.begin(_request(1))
    await runtime.complete("r1", {})
    await runtime.begin(_request(2))
    await runtime.complete("r2", {})

    await runtime.forget_runs(["r1"])

    assert await runtime.get_run("r1") is None
    assert await runtime.find_keyed_run("t1", "a", "k1") is None
    assert await runtime.get_run("r2") is not None  # another thread's run stays
