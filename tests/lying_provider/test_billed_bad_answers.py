"""An answer the provider billed but the loop cannot use (a tool call whose input is no object,
Claude cut at `max_tokens` in the middle of a tool call's input) fails the run as a bad
response, and its usage is booked all the same: the ledger has its row and the actor's total
counts it (attack round 8: it was booked as nothing, so a thread that kept hitting it ran past
its quota for free). Anthropic streamed and not, the OpenAI-compatible provider unstreamed."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from bounded_agents.core.history import window_history
from bounded_agents.core.turn.constants import MAX_ANSWER_CHARS
from bounded_agents.errors import RunFailed
from bounded_agents.providers import OpenAICompatibleProvider
from bounded_agents.providers.anthropic import AnthropicProvider
from bounded_agents.providers.openai.response import oversized_answer
from tests.loop.conftest import SQL_JOURNAL_ONLY, LoopEnv
from tests.providers.fake_anthropic import FakeAnthropic, message, stream
from tests.providers.fake_openai import FakeOpenAI, Reply, completion, wire_tool_call


async def _failed_turn(
    env: LoopEnv,
    model: object,
    *,
    stream_events: bool = False,
    threads: list[str] | None = None,
    failures: list[str] | None = None,
) -> str:
    loop = env.loop(model, window_history(max_messages=10), quota=1_000_000)  # type: ignore[arg-type]
    tid = await env.thread()
    if threads is not None:
        threads.append(tid)
    run_id = str(uuid.uuid4())

    async def sink(event: object) -> None:
        return None

    with pytest.raises(RunFailed) as failed:
        await loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content="go",
            run_id=run_id,
            on_event=sink if stream_events else None,
        )
    if failures is not None:
        failures.append(str(failed.value))
    return run_id


@SQL_JOURNAL_ONLY
async def test_claude_cut_at_max_tokens_mid_tool_input_is_booked(
    env: LoopEnv, fake_anthropic: FakeAnthropic, claude: AnthropicProvider
) -> None:
    fake_anthropic.enqueue(
        stream(
            ["Writing it."],
            tool=("toolu_1", "read_page", ['{"url": "https://x.io/', "aaaaaaaaaaaaaa"]),
            stop_reason="max_tokens",
            input_tokens=5000,
            output_tokens=4096,
        )
    )
    run_id = await _failed_turn(env, claude, stream_events=True)
    booked = await env.ledger.entries_for_run(run_id)
    assert [(e.prompt_tokens, e.completion_tokens) for e in booked] == [(5000, 4096)]
    assert await env.ledger.tokens_used("alice") == 9096


@SQL_JOURNAL_ONLY
@pytest.mark.filterwarnings("ignore::UserWarning")  # the SDK's model warns on a str input
async def test_claude_tool_input_that_is_no_object_unstreamed_is_booked(
    env: LoopEnv, fake_anthropic: FakeAnthropic, claude: AnthropicProvider
) -> None:
    fake_anthropic.enqueue(
        message(
            [{"type": "tool_use", "id": "toolu_1", "name": "read_page", "input": "not an object"}],
            stop_reason="tool_use",
            input_tokens=5000,
            output_tokens=300,
        )
    )
    run_id = await _failed_turn(env, claude)
    assert len(await env.ledger.entries_for_run(run_id)) == 1
    assert await env.ledger.tokens_used("alice") == 5300


@SQL_JOURNAL_ONLY
async def test_openai_tool_arguments_that_are_no_json_are_booked(
    env: LoopEnv, fake_openai: FakeOpenAI, http_client: httpx.AsyncClient
) -> None:
    fake_openai.enqueue(
        Reply.json(completion(None, [wire_tool_call("c1", "read_page", '{"url": "a"')]))
    )
    provider = OpenAICompatibleProvider(
        base_url=fake_openai.base_url, api_key="k", model="m", client=http_client, max_retries=0
    )
    run_id = await _failed_turn(env, provider)
    booked = await env.ledger.entries_for_run(run_id)
    assert [(e.prompt_tokens, e.completion_tokens) for e in booked] == [(11, 7)]
    assert await env.ledger.tokens_used("alice") == 18


HUGE = "a" * (MAX_ANSWER_CHARS + 1)


@SQL_JOURNAL_ONLY
async def test_openai_unstreamed_tool_arguments_past_the_stream_cap_are_refused_and_booked(
    env: LoopEnv, fake_openai: FakeOpenAI, http_client: httpx.AsyncClient
) -> None:
    """Found by attack: streamed, arguments past `MAX_ANSWER_CHARS` were refused; the same
    answer unstreamed (5 MB of arguments) was stored and resent with every later prompt."""
    arguments = json.dumps({"url": HUGE})
    fake_openai.enqueue(
        Reply.json(completion(None, [wire_tool_call("c1", "read_page", arguments)]))
    )
    provider = OpenAICompatibleProvider(
        base_url=fake_openai.base_url, api_key="k", model="m", client=http_client, max_retries=0
    )
    threads: list[str] = []
    failures: list[str] = []
    run_id = await _failed_turn(env, provider, threads=threads, failures=failures)
    assert "the tool arguments passed 2,000,000 characters" in failures[0]
    booked = await env.ledger.entries_for_run(run_id)
    assert [(e.prompt_tokens, e.completion_tokens) for e in booked] == [(11, 7)]
    stored = await env.store.get_thread(threads[0])
    assert stored is not None and [m.role for m in stored.messages] == ["user"]


@SQL_JOURNAL_ONLY
async def test_claude_unstreamed_tool_input_past_the_stream_cap_is_refused_and_booked(
    env: LoopEnv, fake_anthropic: FakeAnthropic, claude: AnthropicProvider
) -> None:
    fake_anthropic.enqueue(
        message(
            [{"type": "tool_use", "id": "toolu_1", "name": "read_page", "input": {"url": HUGE}}],
            stop_reason="tool_use",
            input_tokens=5000,
            output_tokens=300,
        )
    )
    failures: list[str] = []
    run_id = await _failed_turn(env, claude, failures=failures)
    assert "the tool arguments passed 2,000,000 characters" in failures[0]
    assert len(await env.ledger.entries_for_run(run_id)) == 1
    assert await env.ledger.tokens_used("alice") == 5300


def test_the_unstreamed_bound_counts_characters_not_ascii_escapes() -> None:
    """Found by review: an object's arguments were measured as ASCII-escaped JSON, so 400,000
    non-ASCII characters (2.4 million escaped) were refused unstreamed and passed streamed."""
    assert oversized_answer("", [{"q": "\u6f22" * 400_000}]) is None
    assert oversized_answer("", [{"q": "\u6f22" * MAX_ANSWER_CHARS}]) is not None
    assert oversized_answer("x" * (MAX_ANSWER_CHARS + 1), []) is not None
