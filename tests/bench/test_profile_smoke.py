"""The profile mode runs turns under cProfile and names the loop among what it measured."""

from __future__ import annotations

from bench.profile import profile_backend
from bench.run import Config


async def test_the_profile_mode_profiles_whole_turns_on_sqlite() -> None:
    out = await profile_backend("sqlite", Config(mode="smoke"), turns=3, warmup=1)
    assert "=== sqlite: 3 turns, top own time ===" in out
    assert "bounded_agents/core/loop.py" in out and "(run_turn)" in out
