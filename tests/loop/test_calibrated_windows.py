"""Token windows in the model's own tokens (issue 39's "use it for windows"), through the real
loop on SQLite and PostgreSQL: a model whose tokenizer counts twice the chars/4 estimate is sent
a `max_tokens` window that it counts at twice its limit, and refuses it as too long, until one
of its calls has reported usage; from then on the window (and the store's bounded read) is cut
at the limit divided by the learned ratio, and it fits."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from bounded_agents.core.history import window_history
from bounded_agents.core.history.windows import RATIO_STEP, WindowHistory
from bounded_agents.core.loop import AgentDefinition, AgentLoop
from bounded_agents.core.ports import ModelRequest, ModelResponse, ReadBound, Usage
from bounded_agents.core.tokens import estimate_message_tokens
from bounded_agents.errors import ProviderContextExceeded, RunFailed
from bounded_agents.store.ledger import SqlLedger
from tests.factories import assistant, user
from tests.loop.conftest import LoopEnv

CONTEXT = 2000
"""The model's context, in its own tokens."""
WINDOW = 1600
"""The window's `max_tokens`, meant as the model's tokens: room for the system prompt and the
new question within `CONTEXT`."""


class DoubleCountingModel:
    """Counts twice the estimate: a prompt past `CONTEXT` of those is refused as too long; any
    other is answered, reporting its real prompt tokens."""

    model = "digits-2x"

    def __init__(self) -> None:
        self.refused = 0
        self.sent: list[int] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        real = 2 * sum(estimate_message_tokens(m) for m in request.messages)
        if real > CONTEXT:
            self.refused += 1
            raise ProviderContextExceeded(f"prompt is too long: {real} tokens > {CONTEXT}")
        self.sent.append(real)
        usage = Usage(prompt_tokens=real, completion_tokens=3)
        return ModelResponse(content="ok", model="digits-2x", usage=usage)


def digits(n: int) -> list:  # type: ignore[type-arg]
    """`n` runs of digit-heavy orders, about 150 estimated tokens a message."""
    return [
        m for i in range(n) for m in (user(f"order {i}: " + "4071 " * 110), assistant(f"noted {i}"))
    ]


async def _turn(env: LoopEnv, loop: object, tid: str) -> object:
    return await loop.run_turn(  # type: ignore[attr-defined]
        agent="helper", thread_id=tid, actor_id="alice", content="sum?", run_id=str(uuid.uuid4())
    )


async def test_a_2x_tokenizer_is_refused_a_token_window_before_any_reported_usage(
    env: LoopEnv,
) -> None:
    model = DoubleCountingModel()
    loop = env.loop(model, window_history(max_tokens=WINDOW))
    tid = await env.thread(digits(12))
    with pytest.raises(RunFailed, match="too long"):
        await _turn(env, loop, tid)
    assert model.refused >= 1, "the window counted by the estimate is twice the model's limit"


async def test_a_2x_tokenizer_gets_a_window_it_can_take_after_its_first_reported_usage(
    env: LoopEnv,
) -> None:
    model = DoubleCountingModel()
    loop = env.loop(model, window_history(max_tokens=WINDOW))
    warm = await env.thread(digits(1))
    await _turn(env, loop, warm)  # a short thread: its one call reports usage (2x)
    tid = await env.thread(digits(12))

    result = await _turn(env, loop, tid)

    assert model.refused == 0
    assert max(model.sent) <= CONTEXT
    report = result.report  # type: ignore[attr-defined]
    assert report.read_token_bound == WINDOW // 2, "the store read the calibrated bound"


def test_a_calibrated_window_moves_in_steps_and_never_widens() -> None:
    """The limits move only when the ratio crosses a `RATIO_STEP` (one copy per step, the same
    object within it, so prompts between two steps extend each other), a ratio at or below 1
    leaves the window as declared, and a window without a token limit has nothing to scale."""
    window = window_history(max_tokens=8000, min_tokens=4000)
    assert isinstance(window, WindowHistory)
    assert window.calibrated(1.0) is window and window.calibrated(0.6) is window
    a, b = window.calibrated(1.51), window.calibrated(1.6)
    assert a is b, "1.51 and 1.6 round up to the same step"
    assert (a.token_limit, a.min_tokens) == (8000 * 8 // 13, 4000 * 8 // 13)  # / 1.625
    assert a.read_bound == ReadBound(tokens=a.token_limit)
    assert window.calibrated(1.7) is not a and RATIO_STEP == 0.125
    assert (window.token_limit, window.min_tokens) == (8000, 4000), "the declared one is kept"
    counted = window_history(max_messages=10)
    assert isinstance(counted, WindowHistory) and counted.calibrated(3.0) is counted


class CountingLedger(SqlLedger):
    """The SQL ledger, counting the saves of learned ratios."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        self.saves: list[dict[str, float]] = []

    async def save_ratios(self, ratios: Mapping[str, float]) -> None:
        self.saves.append(dict(ratios))
        await super().save_ratios(ratios)


def _loop(env: LoopEnv, model: DoubleCountingModel, ledger: SqlLedger) -> AgentLoop:
    definition = AgentDefinition(
        name="helper", system_prompt="You help.", policy=window_history(max_tokens=WINDOW)
    )
    return AgentLoop(
        store=env.store,
        runtime=env.journal,
        ledger=ledger,
        model=model,
        agents={"helper": definition},
    )


async def test_a_learned_ratio_outlives_its_process_and_is_saved_only_when_it_moves(
    env: LoopEnv,
) -> None:
    """Persisted (`RatioBook`): a process learns the 2x ratio from one reported call and saves
    it once, not once per turn; a NEW loop over the same database restores it before its first
    turn and cuts that turn's window by it, never refused."""
    ledger = CountingLedger(env.store.engine)
    first = DoubleCountingModel()
    loop = _loop(env, first, ledger)
    warm = await env.thread(digits(1))
    for _ in range(6):
        await _turn(env, loop, warm)
    assert ledger.saves == [{"digits-2x": 2.0}], "learned once, saved once"
    assert await ledger.load_ratios() == {"digits-2x": 2.0}

    restarted = DoubleCountingModel()
    fresh = _loop(env, restarted, SqlLedger(env.store.engine))
    await fresh.restore_learned()
    tid = await env.thread(digits(12))
    result = await _turn(env, fresh, tid)

    assert restarted.refused == 0, "sized by the saved ratio from its first call"
    assert result.report.read_token_bound == WINDOW // 2  # type: ignore[attr-defined]
