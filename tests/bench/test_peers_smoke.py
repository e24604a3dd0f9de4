"""The peer bench runs end to end on both databases in a tiny configuration, and every system
really did the turns it is timed for: each LangGraph graph holds the seeded thread plus four
messages per turn (question, tool call, tool result, answer) and answered from the 8 KB page
(with durability "exit" too: its one checkpoint per turn holds the whole turn),
and this project's thread grew by two messages per turn. No timing assertions."""

from __future__ import annotations

import pytest

from bench.data import TOOL_BYTES
from bench.peers import OURS, PEERS, SYSTEMS, peer_targets, render_peers, run_peers
from bench.run import Config
from tests.conftest import PG_ADMIN_URL

LENGTHS = (20, 60)


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_every_system_does_the_same_turns_on_the_same_thread(backend: str) -> None:
    config = Config(
        mode="smoke",
        backends=(backend,),
        lengths=LENGTHS,
        reps=3,
        nowindow_budget_s=0.01,
        postgres_url=PG_ADMIN_URL,
    )
    lines: list[str] = []
    results = await run_peers(config, log=lines.append)

    figures = results["backends"][backend]
    assert set(figures) == {str(n) for n in LENGTHS}
    for length in LENGTHS:
        systems = figures[str(length)]
        assert set(systems) == set(SYSTEMS)
        for name, f in systems.items():
            assert f["time"]["n"] == f["overhead"]["n"] == 3, name
            assert f["floor_ms"] > 0 and f["overhead"]["median_ms"] > 0, name
        assert systems[OURS]["x_ours"] == 1.0
        ours = systems[OURS]
        assert ours["messages_after"] == length + 2 * ours["turns"]
        for name in PEERS:
            peer = systems[name]
            assert peer["messages_after"] == 2 * length + 4 * peer["turns"], name
            assert peer["last_answer"] == f"I read {TOOL_BYTES} characters.", name
    assert lines, "progress is logged"
    table = render_peers(results)
    assert all(name in table for name in SYSTEMS)
    verdicts = [line for line in table.splitlines() if line.startswith(("PASS", "MISS"))]
    assert len(verdicts) == len(LENGTHS), "one verdict per length"


def test_the_verdict_asks_for_twice_the_nearest_peers_overhead() -> None:
    """Issue 37's goal: PASS only where every peer's overhead, its fastest mode included, is at
    least 2x this project's; a lead of 1.9x over the nearest is a MISS naming it."""

    def figures(nearest: float) -> dict[str, dict[str, float]]:
        out = {name: {"x_ours": 5.0} for name in PEERS}
        out[PEERS[-1]] = {"x_ours": nearest}
        return out | {OURS: {"x_ours": 1.0}}

    results = {"backends": {"sqlite": {"100": figures(1.9), "1000": figures(2.0)}}}
    miss, hit = peer_targets(results)
    assert miss.startswith("MISS") and PEERS[-1] in miss and "1.90x" in miss
    assert hit.startswith("PASS")
