"""JournaledContext: steps run once, replay by position, and patch markers cost no position."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bounded_agents.durable.context import JournaledContext
from bounded_agents.errors import JournalMismatch


class Rec:
    def __init__(self, name: str, payload: str) -> None:
        self.name = name
        self.payload = payload


class Sink:
    def __init__(self) -> None:
        self.writes: list[list[tuple[int, str, str]]] = []
        """One entry per commit."""

    async def __call__(self, steps: Sequence[tuple[int, str, str]]) -> None:
        self.writes.append(list(steps))


async def test_a_new_step_runs_once_and_is_journaled_compactly() -> None:
    sink = Sink()
    ctx = JournaledContext("r", [], sink)
    calls = []

    async def fn(tx: object) -> dict[str, object]:
        calls.append(1)
        return {"a": [1, "é"]}

    assert await ctx.step("s", fn) == {"a": [1, "é"]}
    assert sink.writes == [[(0, "s", '{"a":[1,"é"]}')]]
    assert ctx.journal_bytes == {"s": len('{"a":[1,"é"]}'.encode())}
    assert calls == [1]


async def test_replay_returns_the_journaled_value_without_running_the_step() -> None:
    sink = Sink()
    ctx = JournaledContext("r", [Rec("s", '{"v":1}')], sink)

    async def fn(tx: object) -> int:
        raise AssertionError("a replayed step must not run")

    assert await ctx.step("s", fn) == {"v": 1}
    assert sink.writes == [] and ctx.replayed == ["s"]


async def test_replay_refuses_a_step_of_another_name() -> None:
    ctx = JournaledContext("r", [Rec("model:1", "{}")], Sink())

    async def fn(tx: object) -> int:
        return 1

    with pytest.raises(JournalMismatch, match="model:1"):
        await ctx.step("tool:1:x", fn)


async def test_patched_on_a_new_run_records_the_marker_with_the_next_step() -> None:
    sink = Sink()
    ctx = JournaledContext("r", [], sink)
    assert await ctx.patched("m") is True
    assert sink.writes == [], "a marker alone costs no commit"

    async def fn(tx: object) -> int:
        return 7

    assert await ctx.step("s", fn) == 7
    assert sink.writes == [[(0, "patch:m", "true"), (1, "s", "7")]]


async def test_patched_on_an_old_run_takes_the_old_path_without_spending_a_position() -> None:
    sink = Sink()
    ctx = JournaledContext(
        "r", [Rec("persist:user", "{}"), Rec("load:thread", '{"old":true}')], sink
    )

    async def never(tx: object) -> int:
        raise AssertionError

    await ctx.step("persist:user", never)
    assert await ctx.patched("m") is False
    assert await ctx.step("load:thread", never) == {"old": True}
    assert sink.writes == []


async def test_patched_replays_true_for_a_run_that_recorded_it() -> None:
    ctx = JournaledContext("r", [Rec("patch:m", "true"), Rec("x", "1")], Sink())
    assert await ctx.patched("m") is True

    async def never(tx: object) -> int:
        raise AssertionError

    assert await ctx.step("x", never) == 1
