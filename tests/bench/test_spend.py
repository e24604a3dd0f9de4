"""The spend bench's cache simulations: Anthropic reads exactly what an earlier call wrote at
its breakpoints, a prefix below the minimum is neither read nor written, OpenAI writes nothing,
and over a short thread caching costs less than sending uncached."""

from __future__ import annotations

from bench.spend import anthropic_calls, run_spend_bench
from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import ModelRequest

SYSTEM = ChatMessage(role="system", content="Be careful. " * 500)  # ~1,500 tokens


def test_a_call_extending_the_previous_reads_what_it_wrote() -> None:
    first = [SYSTEM, ChatMessage(role="user", content="one")]
    second = [
        *first,
        ChatMessage(role="assistant", content="1"),
        ChatMessage(role="user", content="two"),
    ]
    a, b = anthropic_calls([ModelRequest(messages=first), ModelRequest(messages=second)])
    assert (a["read"], a["written"]) == (0, a["input"])
    assert b["read"] == a["written"]
    assert b["written"] == b["input"] - b["read"]
    [short] = anthropic_calls([ModelRequest(messages=[ChatMessage(role="user", content="hi")])])
    assert (short["read"], short["written"]) == (0, 0)  # below the 1,024-token minimum


async def test_a_short_thread_costs_less_cached_on_both_price_tables() -> None:
    results = await run_spend_bench(turns=60)
    anthropic = results["providers"]["anthropic claude-sonnet-4-5"]
    openai = results["providers"]["openai gpt-5"]
    for levers in (anthropic, openai):
        figures = levers["cached"]
        assert 0 < figures["cached_reads"] < figures["input_tokens"]
        assert figures["cost"] < levers["uncached"]["cost"]
    assert anthropic["cached"]["cache_writes"] > 0 and openai["cached"]["cache_writes"] == 0


async def test_eviction_sends_fewer_tokens_and_costs_less_than_caching_alone() -> None:
    results = await run_spend_bench(turns=60)
    for levers in results["providers"].values():
        evicted, cached = levers["cached_eviction"], levers["cached"]
        assert evicted["input_tokens"] < cached["input_tokens"]
        assert 0 < evicted["cached_reads"]
        assert evicted["cost"] < cached["cost"]
