"""`python -m bench --peers`: this project's turn beside LangGraph's, same thread, same run.

The turn-cost goal was set against LangGraph, so the bench measures LangGraph itself rather than
quoting it. Per backend and thread length, in ONE run, one block of turns per system, each
turn after a few raw floor reads (its block's floor), the database checkpointed between blocks.
Blocks, not rounds: LangGraph's `add_messages` turn writes the whole thread several times, and
interleaved with the others that write-back slowed them (the PostgreSQL floor at 10,000
messages read 5.0 ms in one interleaved run against 0.5 ms at 100). Systems:

- **bounded-agents**: `module.run_turn` with EchoModel and a window of 10 (`bench/turns.py`).
- **LangGraph, `add_messages`**: the common way to keep a chat in a LangGraph state. Its
  checkpointer on the same database (`AsyncSqliteSaver` on SQLite, set to the app's WAL and
  `synchronous=NORMAL`; `AsyncPostgresSaver` on PostgreSQL), default durability (`"async"`:
  a step's checkpoint is written while the next step runs, where this project commits each unit
  before it goes on; a weaker promise, and a cheaper one, left to LangGraph as it ships).
- **LangGraph, `DeltaChannel`**: the same graph with the messages in LangGraph's delta channel
  (beta in 1.2), which checkpoints the new messages instead of the whole list.
- **LangGraph, ..., `exit`**: each graph again with durability `"exit"`: one checkpoint when
  the invocation ends, none per step (LangGraph's fastest mode; a crash mid-turn loses the
  turn, where this project resumes it without a duplicate answer).

The verdict under the table is issue 37's goal: this project's overhead at least `TARGET` times
below the nearest peer's (its fastest mode), per backend and length.

Both LangGraph graphs do what the bench turn does: the model node sees the system prompt and the
newest messages (a window of 20 LangChain messages, started at a question: LangGraph keeps a
tool call, its result and the answer as three messages, so 20 of them hold what 10 of this
project's hold), asks for the tool, the tool node returns the same 8 KB page, the model node
answers. The "model" is a plain function on both sides (EchoModel here), timed and subtracted:
overhead = wall time minus model time. Each thread is seeded with the same messages as the
project's (`bench.data.seed_messages`), so every system holds the same bytes.
"""

from __future__ import annotations

import asyncio
import functools
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import aiosqlite
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from sqlalchemy.engine import make_url

from bench.data import analyze, build_thread, seed_messages, settle
from bench.floor import open_floor
from bench.report import _ms, _table, _x
from bench.run import Config, _database, machine_info
from bench.stats import reps_within, summarize
from bench.trips import DriverClock
from bench.turns import PAGE, TURN_CONTENT, TurnSeries
from bounded_agents.core.messages import Message
from bounded_agents.store.sql import SqlAgentStore

SYSTEM_PROMPT = "You answer from the pages you read."
PEER_WINDOW_FACTOR = 2
"""LangChain messages the model node sees per message of this project's window (see the module
docstring): 20 for a window of 10."""
OURS = "bounded-agents"
LG_PLAIN = "LangGraph, add_messages"
LG_DELTA = "LangGraph, DeltaChannel"
LG_PLAIN_EXIT = "LangGraph, add_messages, exit"
LG_DELTA_EXIT = "LangGraph, DeltaChannel, exit"
SYSTEMS = (OURS, LG_PLAIN, LG_DELTA, LG_PLAIN_EXIT, LG_DELTA_EXIT)
PEERS = SYSTEMS[1:]
TARGET = 2.0
"""The lead the verdict asks for: every peer's overhead at least this times ours."""
PEER_MAX_LENGTH = 10_000
"""The longest thread measured: LangGraph's `add_messages` turn at 100,000 messages would write
its 420 MB state several times per turn (8 s per turn at 10,000 on PostgreSQL already)."""
FLOOR_READS = 5
"""Floor reads before each measured turn; that turn's floor is their median."""


class _PlainState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _fold(state: list[AnyMessage], batches: list[Any]) -> list[AnyMessage]:
    """`add_messages` over a batch of writes, as `DeltaChannel` replays them."""
    return functools.reduce(add_messages, batches, state)


class _DeltaState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(_fold)]


def peer_window(messages: list[AnyMessage], window: int) -> list[AnyMessage]:
    """The newest `window` messages, started at a question (no orphaned tool result)."""
    tail = messages[-window:]
    start = next((i for i, m in enumerate(tail) if isinstance(m, HumanMessage)), len(tail))
    return tail[start:]


class EchoNode:
    """The model node: EchoModel's two answers (ask for the page, then answer), timed."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.seconds = 0.0

    async def __call__(self, state: dict[str, Any]) -> dict[str, Any]:
        # Picking the window and building the prompt are the framework's work, as they are in
        # this project's loop: only what the model does with the prompt counts as model time.
        prompt = [SystemMessage(SYSTEM_PROMPT), *peer_window(state["messages"], self.window)]
        start = time.perf_counter()
        last = prompt[-1]
        if isinstance(last, ToolMessage):
            answer = AIMessage(content=f"I read {len(last.content)} characters.")
        else:
            url = str(last.content).split(" ", 1)[-1]
            call_id = f"call_{len(state['messages'])}"
            call = {"id": call_id, "name": "read_page", "args": {"url": url}}
            answer = AIMessage(content="", tool_calls=[call])
        self.seconds += time.perf_counter() - start
        return {"messages": [answer]}


async def _read_page(state: dict[str, Any]) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]
    return {"messages": [ToolMessage(content=PAGE, tool_call_id=call["id"])]}


def _route(state: dict[str, Any]) -> str:
    return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END


def peer_graph(state: type, saver: BaseCheckpointSaver[Any], model: EchoNode) -> Any:
    graph = StateGraph(state)
    graph.add_node("agent", model)
    graph.add_node("tools", _read_page)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", _route, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def langchain_form(messages: Iterable[Message]) -> list[AnyMessage]:
    """The seeded thread as LangChain messages: an answer with a tool exchange becomes the call,
    its result and the answer (three messages), as a LangGraph agent stores them."""
    out: list[AnyMessage] = []
    for m in messages:
        if m.role == "user":
            out.append(HumanMessage(m.content))
            continue
        if m.tool_calls:
            calls = [{"id": c.id, "name": c.name, "args": c.arguments} for c in m.tool_calls]
            out.append(AIMessage(content="", tool_calls=calls))
            out += [ToolMessage(content=r.content, tool_call_id=r.call_id) for r in m.tool_results]
        out.append(AIMessage(content=m.content))
    return out


class PeerSeries:
    """Turns of one LangGraph graph on one seeded thread."""

    def __init__(
        self, graph: Any, model: EchoNode, thread_id: str, durability: str | None = None
    ) -> None:
        self.graph = graph
        self.model = model
        self.config = {"configurable": {"thread_id": thread_id}}
        self.durability = durability
        """LangGraph's durability mode (None: its default, `"async"`)."""
        self.samples: dict[str, list[float]] = {"time": [], "overhead": []}

    async def seed(self, length: int, tool_bytes: int) -> None:
        messages = langchain_form(seed_messages(length, seed=length, tool_bytes=tool_bytes))
        await self.graph.aupdate_state(self.config, {"messages": messages})

    async def turn(self) -> None:
        await self.graph.ainvoke(
            {"messages": [HumanMessage(TURN_CONTENT)]}, self.config, durability=self.durability
        )

    async def once(self) -> None:
        self.model.seconds = 0.0
        start = time.perf_counter()
        await self.turn()
        seconds = time.perf_counter() - start
        self.samples["time"].append(seconds)
        self.samples["overhead"].append(seconds - self.model.seconds)

    async def outcome(self) -> tuple[int, str]:
        """(messages the thread holds, the last answer): what the turns really did."""
        state = await self.graph.aget_state(self.config)
        messages = state.values["messages"]
        return len(messages), str(messages[-1].content)


class OurSeries:
    """`TurnSeries` behind `PeerSeries`'s methods (`turn`, `once`, `outcome`, `samples`)."""

    def __init__(self, series: TurnSeries) -> None:
        self.series = series
        self.samples = series.samples

    async def turn(self) -> None:
        await self.series.warm(1)

    async def once(self) -> None:
        await self.series.once()

    async def outcome(self) -> tuple[int, str]:
        last = self.series.last
        if last is None or last.message.seq is None:
            raise RuntimeError("no measured turn")
        return last.message.seq, last.message.content


@asynccontextmanager
async def peer_saver(url: str) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    """LangGraph's checkpointer on the bench's own database."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        conn = await aiosqlite.connect(str(parsed.database))
        try:
            await conn.execute("PRAGMA journal_mode=WAL")  # as the app's engine sets them
            await conn.execute("PRAGMA synchronous=NORMAL")
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            yield saver
        finally:
            await conn.close()
        return
    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        yield saver


Series = OurSeries | PeerSeries


async def _block(
    series: Series,
    floor_read: Callable[[], Awaitable[Any]],
    *,
    reps: int,
    warmup: int,
    budget_s: float,
) -> list[float]:
    """One system's turns: `warmup` turns, then `reps` turns (fewer if they would exceed
    `budget_s`, never fewer than 3), each after `FLOOR_READS` floor reads. Returns the floor
    per turn, in seconds."""
    start = time.perf_counter()
    for _ in range(max(1, warmup)):
        await series.turn()
    wanted = reps_within((time.perf_counter() - start) / max(1, warmup), reps, budget_s, 3)
    floors: list[float] = []
    for _ in range(wanted):
        reads = []
        for _ in range(FLOOR_READS):
            start = time.perf_counter()
            await floor_read()
            reads.append(time.perf_counter() - start)
        floors.append(statistics.median(reads))
        await series.once()
    return floors


async def _backend(backend: str, url: str, config: Config, log: Callable[[str], None]) -> Any:
    store = SqlAgentStore.from_url(url)
    out: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.dispose)
        await store.create_schema()
        floor = await open_floor(url, store.engine)
        stack.push_async_callback(floor.close)
        saver = await stack.enter_async_context(peer_saver(url))
        for index, length in enumerate(peer_lengths(config, log)):
            thread_id, _ = await build_thread(store, length, tool_bytes=config.tool_bytes)
            window = PEER_WINDOW_FACTOR * config.window
            systems: dict[str, Series] = {
                OURS: OurSeries(TurnSeries(store, thread_id, config.window, DriverClock()))
            }
            for name, state, durability in (
                (LG_PLAIN, _PlainState, None),
                (LG_DELTA, _DeltaState, None),
                (LG_PLAIN_EXIT, _PlainState, "exit"),
                (LG_DELTA_EXIT, _DeltaState, "exit"),
            ):
                model = EchoNode(window)
                graph = peer_graph(state, saver, model)
                key = f"{name}-{length}"  # a thread of its own per system
                systems[name] = PeerSeries(graph, model, key, durability)
            for series in systems.values():
                if isinstance(series, PeerSeries):
                    await series.seed(length, config.tool_bytes)
            await analyze(store.engine)  # as the main bench does after seeding
            log(f"[{backend}] {length:,}: seeded every system")
            figures: dict[str, dict[str, Any]] = {}
            # The order turns with each length, so no system always follows the same one (the
            # one before may leave write-back behind that `settle` does not wait out).
            names = list(systems)
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                series = systems[name]
                await settle(store.engine)
                floors = await _block(
                    series,
                    functools.partial(floor.read, thread_id, config.window),
                    reps=config.reps,
                    warmup=config.turn_warmup,
                    budget_s=config.nowindow_budget_s,
                )
                messages, answer = await series.outcome()
                figures[name] = {
                    **_figures(series.samples),
                    "floor_ms": statistics.median(floors) * 1e3,
                    "turns": max(1, config.turn_warmup) + len(floors),
                    "messages_after": messages,
                    "last_answer": answer,
                }
                log(f"[{backend}] {length:,}: {name} x{len(floors)}")
            # One floor for every system's ratio: the one read beside this project's turns. A
            # peer's own block floor is reported too; `add_messages` slows it with its own
            # write-back, which would flatter its ratio.
            mine = figures[OURS]
            for figure in figures.values():
                figure["x_floor"] = figure["overhead"]["median_ms"] / mine["floor_ms"]
                figure["x_ours"] = figure["overhead"]["median_ms"] / mine["overhead"]["median_ms"]
                figure["turn_x_ours"] = figure["time"]["median_ms"] / mine["time"]["median_ms"]
            out[str(length)] = figures
    return out


def peer_lengths(config: Config, log: Callable[[str], None] | None = None) -> list[int]:
    """The lengths measured: each once, none above `PEER_MAX_LENGTH` (said in `log`)."""
    dropped = sorted(n for n in set(config.lengths) if n > PEER_MAX_LENGTH)
    if dropped and log is not None:
        log(f"peers: lengths above {PEER_MAX_LENGTH:,} are not measured: {dropped}")
    return sorted(n for n in set(config.lengths) if n <= PEER_MAX_LENGTH)


def _figures(samples: dict[str, list[float]]) -> dict[str, Any]:
    return {"time": summarize(samples["time"]), "overhead": summarize(samples["overhead"])}


async def run_peers(config: Config, log: Callable[[str], None] = print) -> dict[str, Any]:
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine_info(config),
        "window": config.window,
        "peer_window": PEER_WINDOW_FACTOR * config.window,
        "backends": {},
    }
    for backend in config.backends:
        async with _database(backend, config.postgres_url) as url:
            results["backends"][backend] = await _backend(backend, url, config, log)
    results["elapsed_s"] = time.perf_counter() - started
    return results


def render_peers(results: dict[str, Any]) -> str:
    rows = []
    for backend, lengths in results["backends"].items():
        for length, figures in lengths.items():
            for name in (n for n in SYSTEMS if n in figures):
                f = figures[name]
                rows.append(
                    [
                        backend,
                        f"{int(length):,}",
                        name,
                        _ms(f["time"]["median_ms"]),
                        _x(f["turn_x_ours"]),
                        _ms(f["overhead"]["median_ms"]),
                        _x(f["x_ours"]),
                        _x(f["x_floor"]),
                        _ms(f["floor_ms"]),
                        str(f["time"]["n"]),
                    ]
                )
    header = [
        "backend",
        "messages",
        "system",
        "turn ms",
        "x ours",
        "overhead ms",
        "x ours",
        "x floor",
        "block floor ms",
        "n",
    ]
    title = (
        "PEERS: ONE TURN (one tool call, two model calls) ON THE SAME THREAD CONTENT, ONE RUN\n"
        f"bounded-agents with a window of {results['window']} messages, LangGraph with "
        f"{results['peer_window']} LangChain messages; medians; overhead = turn minus model time;"
        " x ours = against bounded-agents' turn and overhead; x floor = overhead against the raw"
        " read measured beside bounded-agents' turns; block floor = the raw read measured"
        " beside that system's own turns"
    )
    return "\n".join(
        [title, _table(header, rows, left=frozenset({0, 2})), "", *peer_targets(results)]
    )


def peer_targets(results: dict[str, Any]) -> list[str]:
    """PASS where every peer's overhead is at least `TARGET` times this project's, per
    backend and length (systems the run did not measure are left out)."""
    lines = []
    for backend, lengths in results["backends"].items():
        for length, figures in lengths.items():
            best = min((n for n in PEERS if n in figures), key=lambda n: figures[n]["x_ours"])
            ahead = figures[best]["x_ours"] >= TARGET
            lines.append(
                f"{'PASS' if ahead else 'MISS'}  {backend:<8}  {int(length):>7,} messages: "
                f"overhead {TARGET:.0f}x below every peer's "
                f"(nearest: {best}, {figures[best]['x_ours']:.2f}x)"
            )
    return lines


def peers_main(json_path: Path, config: Config) -> int:
    """`python -m bench --peers`: the table, and the figures as JSON."""
    results = asyncio.run(run_peers(config))
    print(render_peers(results))
    json_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {json_path} ({results['elapsed_s']:.0f} s)")
    return 0
