"""Precedence through the public surface, busy threads, and the no-journal path."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from bounded_agents import AgentModule, HistoryConfig, agent, tool
from bounded_agents.core.history import HistoryPolicyContext, HistorySelection, window_history
from bounded_agents.core.messages import Message, ToolCall
from bounded_agents.core.ports import ModelRequest, ModelResponse
from bounded_agents.errors import ConfigError, RunFailed, ThreadBusy, ThreadNotFound
from bounded_agents.settings import Settings
from bounded_agents.store import MemoryStore
from bounded_agents.testing import Gate, ScriptedProvider, reply
from tests.factories import assistant, user
from tests.loop.conftest import CountingStore, FullReadStore, LoopEnv

SETTINGS = Settings(migrate_on_start=False)


class KeepTwo:
    """A custom policy: the newest two (it may declare the bound: it keeps the newest)."""

    max_messages = 2

    def select(self, messages: list[Message], ctx: HistoryPolicyContext) -> HistorySelection:
        return HistorySelection(keep=messages[-2:], drop=messages[:-2])


@agent(name="pinned", history=HistoryConfig(max_messages=1))
class Pinned:
    pass


@agent(name="plain")
class Plain:
    pass


async def _sent(module: AgentModule, agent_name: str, model: ScriptedProvider) -> int:
    thread = await module.store.create_thread(actor_id="a", agent=agent_name)
    await module.store.append_messages(
        thread.id, [m for i in range(5) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    )
    await module.run_turn(agent=agent_name, thread_id=thread.id, actor_id="a", content="now")
    return len(model.calls[-1].messages) - 1  # minus the system prompt


async def test_agent_history_beats_history_policy_beats_history_and_none_sends_all() -> None:
    model = ScriptedProvider(default=reply("ok"))
    both = AgentModule.for_root(
        model=model,
        store=MemoryStore(),
        agents=[Pinned, Plain],
        history_policy=KeepTwo(),
        history={"max_messages": 3},
        settings=SETTINGS,
    )
    assert await _sent(both, "pinned", model) == 1  # @agent(history=) wins
    assert await _sent(both, "plain", model) == 2  # then history_policy
    config_only = AgentModule.for_root(
        model=model,
        store=MemoryStore(),
        agents=[Plain],
        history={"max_messages": 3},
        settings=SETTINGS,
    )
    assert await _sent(config_only, "plain", model) == 3  # then history
    nothing = AgentModule.for_root(
        model=model, store=MemoryStore(), agents=[Plain], settings=SETTINGS
    )
    assert await _sent(nothing, "plain", model) == 11  # no ceiling: the whole thread


async def test_history_accepts_a_dict_and_a_disabled_history_sends_only_the_new_message() -> None:
    @agent(name="forgetful", history={"enabled": False})
    class Forgetful:
        pass

    model = ScriptedProvider(default=reply("ok"))
    module = AgentModule.for_root(
        model=model, store=MemoryStore(), agents=[Forgetful], settings=SETTINGS
    )
    assert await _sent(module, "forgetful", model) == 1
    assert model.calls[-1].messages[-1].content == "now"


async def test_tools_from_the_agent_class_are_advertised_and_bad_arguments_reach_the_model() -> (
    None
):
    @agent(name="pages", system_prompt="Read pages.")
    class Pages:
        @tool
        async def read_page(self, url: str, max_chars: int = 100) -> str:
            """Fetch a page's text.

            More detail the model does not need."""
            return f"page {url}"[:max_chars]

    model = ScriptedProvider(
        [
            reply(
                "",
                tool_calls=[ToolCall(id="c1", name="read_page", arguments={"url": 5, "bogus": 1})],
            ),
            reply("", tool_calls=[ToolCall(id="c2", name="read_page", arguments={"url": "x"})]),
            reply("done"),
        ]
    )
    module = AgentModule.for_root(
        model=model, store=MemoryStore(), agents=[Pages], settings=SETTINGS
    )
    thread = await module.store.create_thread(actor_id="a", agent="pages")
    result = await module.run_turn(agent="pages", thread_id=thread.id, actor_id="a", content="go")
    spec = model.calls[0].tools[0]
    assert spec.name == "read_page" and spec.description == "Fetch a page's text."
    assert spec.parameters["required"] == ["url"]
    assert spec.parameters["properties"]["max_chars"]["type"] == "integer"
    bad, good = result.message.tool_results
    assert bad.is_error and "url" in bad.content and "bogus" in bad.content
    assert not good.is_error and good.content == "page x"


async def test_a_second_turn_on_a_busy_thread_is_refused_and_not_stored(env: LoopEnv) -> None:
    tid = await env.thread()
    gate = Gate(reply("first answer"))
    loop = env.loop(ScriptedProvider([gate]), window_history(max_messages=5))
    first = asyncio.create_task(
        loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content="first",
            run_id=str(uuid.uuid4()),
        )
    )
    await gate.reached()
    with pytest.raises(ThreadBusy):
        await loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="alice",
            content="second",
            run_id=str(uuid.uuid4()),
        )
    gate.release.set()
    await first
    thread = await env.store.get_thread(tid)
    assert thread is not None and [m.content for m in thread.messages] == ["first", "first answer"]


async def test_another_actors_thread_is_not_found(env: LoopEnv) -> None:
    tid = await env.thread(actor="alice")
    loop = env.loop(ScriptedProvider([reply("x")]), window_history(max_messages=5))
    with pytest.raises(ThreadNotFound):
        await loop.run_turn(
            agent="helper",
            thread_id=tid,
            actor_id="mallory",
            content="hi",
            run_id=str(uuid.uuid4()),
        )
    thread = await env.store.get_thread(tid)
    assert thread is not None and thread.messages == []


async def test_without_a_journal_a_failed_run_cannot_be_resumed_but_the_thread_goes_on() -> None:
    from bounded_agents.errors import ProviderError, RunNotFound

    model = ScriptedProvider([ProviderError("down"), reply("back")])
    module = AgentModule.for_root(
        model=model, store=MemoryStore(), agents=[Plain], settings=SETTINGS
    )
    thread = await module.store.create_thread(actor_id="a", agent="plain")
    with pytest.raises(RunFailed) as info:
        await module.run_turn(agent="plain", thread_id=thread.id, actor_id="a", content="one")
    with pytest.raises(RunNotFound):
        await module.loop.resume(info.value.run_id)
    result = await module.run_turn(agent="plain", thread_id=thread.id, actor_id="a", content="two")
    assert result.message.content == "back"
    assert result.report.journal_bytes == {}


def test_every_window_bounds_its_read_and_a_legacy_max_messages_is_honoured() -> None:
    from bounded_agents.core.loop import read_bound
    from bounded_agents.core.ports import ReadBound

    class Legacy:
        max_messages = 0  # the older promise: still a bound, at least the newest row

        def select(self, messages, ctx):  # type: ignore[no-untyped-def]
            raise AssertionError

    assert read_bound(window_history(max_messages=7)) == ReadBound(messages=7)
    assert read_bound(window_history(max_messages=None, max_tokens=100)) == ReadBound(tokens=100)
    summarizing = window_history(max_messages=7, summarize=lambda d, c: None)  # type: ignore[arg-type,return-value]
    assert read_bound(summarizing) == ReadBound(messages=11)
    assert read_bound(Legacy()) == ReadBound(messages=1)


async def test_a_cancelled_turn_without_a_journal_gives_the_thread_back() -> None:
    entered = asyncio.Event()

    async def hang(_request: ModelRequest) -> ModelResponse:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    module = AgentModule.for_root(
        model=ScriptedProvider([hang, reply("second")]),
        store=MemoryStore(),
        agents=[Plain],
        settings=SETTINGS,
    )
    thread = await module.store.create_thread(actor_id="a", agent="plain")
    task = asyncio.create_task(
        module.run_turn(agent="plain", thread_id=thread.id, actor_id="a", content="one")
    )
    await asyncio.wait_for(entered.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    result = await module.run_turn(agent="plain", thread_id=thread.id, actor_id="a", content="two")
    assert result.message.content == "second"


async def test_resuming_a_run_of_an_agent_that_is_gone_leaves_the_run_untouched(
    env: LoopEnv,
) -> None:
    from bounded_agents.errors import AgentNotFound, ProviderError

    tid = await env.thread()
    run_id = str(uuid.uuid4())
    with pytest.raises(RunFailed):
        await env.loop(
            ScriptedProvider([ProviderError("down")]), window_history(max_messages=3)
        ).run_turn(agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=run_id)
    other = env.loop(ScriptedProvider([]), window_history(max_messages=3), agent="renamed")
    with pytest.raises(AgentNotFound):
        await other.resume(run_id)
    record = await env.journal.get_run(run_id)
    assert record is not None and record.status == "failed", "not claimed, so not stranded"


@pytest.mark.parametrize(
    ("history", "key"),
    [
        ({"max_messages": 0}, "max_messages"),
        ({"max_mesages": 5}, "max_mesages"),
        ({"runs": 2, "summarize": True}, "runs"),
    ],
)
def test_for_root_refuses_a_bad_module_history_even_when_every_agent_overrides_it(
    history: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError, match=key):
        AgentModule.for_root(
            agents=[Pinned], history=history, store=MemoryStore(), settings=SETTINGS
        )


def test_for_root_accepts_summarize_alone_as_the_default_window_as_the_settings_do() -> None:
    module = AgentModule.for_root(
        agents=[Plain], history={"summarize": True}, store=MemoryStore(), settings=SETTINGS
    )
    policy = module.loop.definition("plain").policy
    assert getattr(policy, "count_limit", None) == 40
    assert getattr(policy, "summarize", None) is not None


async def test_the_ledger_books_summaries_under_the_name_chat_calls_use() -> None:
    """One name per model: EchoModel's summaries and chat calls are both booked as `echo`."""
    from bounded_agents.providers.echo import EchoModel
    from bounded_agents.store.ledger import MemoryLedger

    ledger = MemoryLedger()
    module = AgentModule.for_root(
        agents=[Plain],
        model=EchoModel(),
        history={"max_messages": 2, "summarize": True},
        store=MemoryStore(),
        ledger=ledger,
        settings=SETTINGS,
    )
    thread = await module.store.create_thread(actor_id="a", agent="plain")
    await module.store.append_messages(
        thread.id, [m for i in range(5) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    )
    result = await module.run_turn(agent="plain", thread_id=thread.id, actor_id="a", content="x")
    assert {row.purpose for row in result.report.ledger} == {"chat", "history_summary"}
    assert {row.model for row in result.report.ledger} == {"echo"}


async def test_read_bound_reports_what_the_store_was_asked_not_what_the_policy_declares(
    env: LoopEnv,
) -> None:
    """A store without the bounded read reads the whole thread: the report and the window
    preview say None, though the policy declares 4; a store with it reports the 4 it got."""
    tid = await env.thread([user(f"q{i}") for i in range(6)])
    full = FullReadStore(env.store)
    for store, bound in ((full, None), (CountingStore(env.store), 4)):
        loop = env.loop(ScriptedProvider([reply("a")]), window_history(max_messages=4), store=store)
        result = await loop.run_turn(
            agent="helper", thread_id=tid, actor_id="alice", content="q", run_id=str(uuid.uuid4())
        )
        assert result.report.read_bound == bound
        assert (await loop.preview(tid, "alice")).read_bound == bound
    assert full.full_reads == 2  # the turn and the preview each read the whole thread


async def test_a_sweep_that_loses_the_race_for_a_run_logs_it_as_info_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Several processes sweep the same expired run; all but one find it claimed (ThreadBusy).
    That is the expected outcome of the race, not a failure worth an exception in the log."""
    module = AgentModule.for_root(agents=[Plain], store=MemoryStore(), settings=SETTINGS)

    async def claimed_elsewhere(run_id: str, on_event: object = None) -> None:
        raise ThreadBusy("t1")

    module.loop.resume = claimed_elsewhere  # type: ignore[method-assign,assignment]
    with caplog.at_level("INFO"):
        await module._resume_quietly("run-1")
    assert [r.levelname for r in caplog.records if "run-1" in r.getMessage()] == ["INFO"]
    assert not any(r.levelname == "ERROR" for r in caplog.records)
