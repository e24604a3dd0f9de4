"""The command line. Argument parsing only; the work is done by the store, the module, or
(for `chat` and `inspect`) a running server reached over HTTP."""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO
from urllib.parse import quote

import httpx

from bounded_agents.errors import ConfigError, StoreError
from bounded_agents.redact import redacted_url
from bounded_agents.settings import get_settings

PREVIEW_CHARS = 80
_ESCAPED = {
    code: f"\\x{code:02x}"
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
    if code not in (0x09, 0x0A)  # tab and newline are layout, not commands
}
"""Every control character (C0, DEL, C1) but tab and newline, as the `\\x..` that names it."""
KEY_HINT = (
    "hint: pass the key this client sends with --api-key or AGENT_API_KEY (singular); "
    "AGENT_API_KEYS (plural) is the server's list of key=actor pairs"
)


def shown(text: object) -> str:
    """`text` as the terminal may see it: control characters other than newline and tab
    escaped (ESC as `\\x1b`). What the server sends is the model's words, tool output and
    error messages, and a prompt-injected page can put escape sequences in any of them: raw,
    they set the terminal's title (OSC 0), write the clipboard (OSC 52) or erase lines (CSI).
    Every line `chat` and `inspect` print from the server goes through here."""
    return str(text).translate(_ESCAPED)


def _port(text: str) -> int:
    """`--port`: refused by argparse in one line (exit 2) when no socket could bind it, as
    AGENT_PORT is by the settings."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 1-65535")
    return port


def _fail(text: str) -> None:
    print(shown(f"error: {text}"), file=sys.stderr)


def _migrate() -> int:
    from bounded_agents.store import SqlAgentStore

    settings = get_settings()
    problem = asyncio.run(database_problem(settings.database_url, settings.db_pgbouncer))
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1

    async def run() -> None:
        store = SqlAgentStore.from_url(settings.database_url, pgbouncer=settings.db_pgbouncer)
        try:
            await store.create_schema()
        finally:
            await store.dispose()

    try:
        asyncio.run(run())
    except StoreError as exc:  # a refused migration says why, in one line
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"database at head: {redacted_url(settings.database_url)}")
    return 0


def _distribute(shard_count: int | None) -> int:
    """Each table on a line, as the database has it now; a refusal (not PostgreSQL, no Citus,
    not migrated, distributed some other way) is one line and exit status 1."""
    from bounded_agents.store.distribute import distribute
    from bounded_agents.store.engine import make_engine

    settings = get_settings()
    problem = asyncio.run(database_problem(settings.database_url, settings.db_pgbouncer))
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1

    async def run() -> list[str]:
        engine = make_engine(settings.database_url, pgbouncer=settings.db_pgbouncer)
        try:
            return [o.line() for o in await distribute(engine, shard_count=shard_count)]
        finally:
            await engine.dispose()

    try:
        lines = asyncio.run(run())
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    print(f"distributed with Citus: {redacted_url(settings.database_url)}")
    return 0


DEFAULT_APP = "app.main:app"
"""What `serve` serves unless told: the usual FastAPI layout's `app/main.py`, here this
repository's demo, in a user's project their own app."""


def _serve(target: str, host: str | None, port: int | None) -> int:
    """Settings, the app and the database are checked before uvicorn starts, so what an
    operator got wrong is one line, not uvicorn's start-up traceback."""
    import uvicorn

    settings = get_settings()
    problem = asyncio.run(database_problem(settings.database_url, settings.db_pgbouncer))
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    application = load_app(target)
    uvicorn.run(
        application,
        host=host or settings.host,
        port=port or settings.port,
        timeout_keep_alive=settings.keep_alive_seconds,
        log_config=_log_config(settings.log_level),
    )
    return 0


def load_app(target: str) -> Any:
    """The ASGI app `module:attribute` names (uvicorn's notation); a callable that is not an
    app itself (a factory such as `create_app`) is called with no arguments. What cannot be
    loaded is a `ConfigError` naming the target and `--app`."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"--app {target!r} is not module:attribute (e.g. {DEFAULT_APP})")
    sys.path.insert(0, os.getcwd())  # as uvicorn does: the app is the current project's
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import {module_name!r} for {target} ({exc}); run from your project's "
            "directory or pass --app module:attribute (your FastAPI app, or a factory)"
        ) from exc
    try:
        found = getattr(module, attribute)
    except AttributeError as exc:
        raise ConfigError(f"{module_name!r} has no {attribute!r} for {target}") from exc
    if callable(found) and not hasattr(found, "router"):
        found = found()
    return found


async def database_problem(url: str, pgbouncer: bool = False) -> str | None:
    """Why the database at `url` cannot be reached (one line, password masked), or None.

    The probe's engine is the app's (`make_engine`, `pgbouncer` as configured): behind PgBouncer
    in transaction mode a plain one leaves its prepared statements on the server connection,
    under names the next process's probe prepares again (`__asyncpg_stmt_1__ already exists`)."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from bounded_agents.store.engine import make_engine

    try:
        engine = make_engine(url, pgbouncer=pgbouncer)
    except Exception as exc:  # a URL SQLAlchemy cannot use: no driver, bad options
        return f"cannot use AGENT_DATABASE_URL {redacted_url(url)}: {type(exc).__name__}"
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:  # whatever the driver raises: the operator needs its words
        cause = getattr(exc, "orig", None) or exc
        detail = (str(cause).strip().splitlines() or [""])[0]
        password = make_url(url).password
        if password:
            detail = detail.replace(str(password), "***")
        return f"cannot reach the database at {redacted_url(url)}: {type(cause).__name__}: {detail}"
    finally:
        await engine.dispose()
    return None


def _log_config(level: str) -> dict[str, Any]:
    """uvicorn's own logging, with the app's loggers on its handler at `level`: without them
    the app's info lines (runs resumed, migrations run) would go nowhere."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["bounded_agents"] = {
        "handlers": ["default"],
        "level": level.upper(),
        "propagate": False,
    }
    return config


# --- talking to a running server -----------------------------------------------------------


def _client(url: str, api_key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # No read timeout: a turn streams for as long as the model takes.
    timeout = httpx.Timeout(10.0, read=None)
    return httpx.Client(base_url=url, headers=headers, timeout=timeout, trust_env=False)


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        text = f"{response.status_code} {error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        text = f"{response.status_code}: {response.text[:200]}"
    if response.status_code == 401:
        text += f"\n{KEY_HINT}"
    return text


def only_agent(client: httpx.Client, url: str) -> str:
    """The server's one agent (`GET /agents`), for `chat` without `--agent`; with several (or
    none) a `ConfigError` naming them, so the user picks one rather than the demo's name
    being guessed."""
    listed = client.get("/agents")
    if listed.status_code != 200:
        raise ConfigError(f"{url}: cannot list its agents ({_error_text(listed)}); give --agent")
    names = sorted(str(a["name"]) for a in listed.json()["agents"])
    if len(names) == 1:
        return names[0]
    if not names:
        raise ConfigError(f"{url} serves no agent")
    quoted = [repr(shown(n)) for n in names]
    listing = f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    raise ConfigError(f"{url} serves {len(names)} agents, {listing}: choose one with --agent")


def chat(
    client: httpx.Client,
    agent: str,
    thread_id: str | None,
    lines: Iterable[str],
    out: TextIO,
) -> int:
    """Post each line as a turn and print the answer as it streams in."""
    if thread_id is None:
        created = client.post(f"/agents/{_segment(agent)}/threads", json={})
        if created.status_code != 201:
            _fail(_error_text(created))
            return 1
        thread_id = created.json()["id"]
        print(shown(f"thread {thread_id}"), file=out, flush=True)
    status = 0
    for line in lines:
        content = line.rstrip("\n")
        if not content.strip():
            continue
        if not _turn(client, agent, thread_id, content, out):
            status = 1
    return status


def prompted_lines(prompt: str, out: TextIO) -> Iterator[str]:
    """Lines typed at a terminal, each after `prompt`; ends at Ctrl-D (end of input)."""
    while True:
        out.write(prompt)
        out.flush()
        line = sys.stdin.readline()
        if not line:
            out.write("\n")
            return
        yield line


def _turn(client: httpx.Client, agent: str, thread_id: str, content: str, out: TextIO) -> bool:
    from bounded_agents.http.sse import iter_sse

    path = f"/agents/{_segment(agent)}/threads/{_segment(thread_id)}/messages"
    headers = {"Accept": "text/event-stream"}
    with client.stream("POST", path, json={"content": content}, headers=headers) as response:
        if response.status_code != 200:
            response.read()
            _fail(_error_text(response))
            return False
        at_line_start = True
        for event, data in iter_sse(response.iter_lines()):
            payload: dict[str, Any] = json.loads(data)
            if event == "delta":
                out.write(shown(payload["text"]))
                out.flush()
                at_line_start = payload["text"].endswith("\n")
                continue
            if not at_line_start:
                out.write("\n")
                at_line_start = True
            if event == "tool_call":
                args = json.dumps(payload["arguments"], ensure_ascii=False)
                print(shown(f"[tool {payload['name']}({args})]"), file=out, flush=True)
            elif event == "tool_result":
                flag = " error" if payload["is_error"] else ""
                print(
                    shown(f"[tool {payload['name']}{flag}: {payload['content_chars']} chars]"),
                    file=out,
                    flush=True,
                )
            elif event == "error":
                error = payload["error"]
                _fail(f"{error['code']}: {error['message']}")
                return False
            elif event == "done":
                return True
    if not at_line_start:
        out.write("\n")
    _fail(
        "the answer stream ended before the turn did (no done or error event): the server "
        "or a proxy cut it; the turn may still finish and be stored"
    )
    return False


def _segment(name: str) -> str:
    """`name` as one URL path segment: `/`, `?`, `#` and the like escaped (found by attack:
    `--agent a/b` reached another route)."""
    return quote(name, safe="")


def inspect(client: httpx.Client, thread_id: str, out: TextIO) -> int:
    """Print what the thread's next turn would send the model."""
    response = client.get(f"/threads/{_segment(thread_id)}/window")
    if response.status_code != 200:
        _fail(_error_text(response))
        return 1
    window = response.json()
    bound = window["read_bound"]
    if bound is not None:
        reads = f"reads the newest {bound} messages"
    else:
        reads = "reads the whole thread"
    print(
        shown(f"thread {window['thread_id']} (agent {window['agent']}): the next turn {reads}"),
        file=out,
    )
    for m in window["kept"]:
        text = " ".join(m["content"].split())[:PREVIEW_CHARS]
        calls = f" +{len(m['tool_calls'])} tool call(s)" if m["tool_calls"] else ""
        line = f"  {m['seq']!s:>5} {m['role']!s:<9} {m['tokens']!s:>6} tok  {text}{calls}"
        print(shown(line), file=out)
    kept = len(window["kept"])
    summary = ", folded into a summary" if window["summarizes"] else ""
    print(
        shown(
            f"kept {kept} messages, ~{window['total_tokens']} tokens; "
            f"dropped {window.get('dropped_read_count', window.get('dropped_count'))}{summary}"
        ),
        file=out,
    )
    print(
        f"your next message takes the window's last place: {kept} + 1 = {kept + 1} messages sent",
        file=out,
    )
    return 0


# --- arguments -----------------------------------------------------------------------------


def default_url() -> str:
    """The server `serve` would start here: AGENT_HOST and AGENT_PORT (a host bound to every
    address is reached at the loopback one)."""
    settings = get_settings()
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "", "::") else settings.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}"


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="the running server to talk to (default: http://$AGENT_HOST:$AGENT_PORT, "
        "http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("AGENT_API_KEY"),
        help="the bearer key this client sends (default: $AGENT_API_KEY, singular; the "
        "server's $AGENT_API_KEYS lists the keys it accepts). Not needed in local "
        "development mode (a server without AGENT_API_KEYS)",
    )


_NEEDS_SERVER = (
    "Needs the server running (`bounded-agents serve`, or `make run` in this repository, in "
    "another terminal), or --url naming where it runs."
)


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    args = _parser(prog or "bounded-agents").parse_args(argv)
    try:
        return _command(args)
    except ConfigError as exc:
        # Escaped: a refusal may quote the server (`only_agent`'s error page; found by attack)
        print(shown(f"error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # `chat | head -1`: the reader left; so do we, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_database_commands(sub)
    _add_client_commands(sub)
    return parser


def _add_database_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`serve`, `migrate` and `distribute`: what runs next to the database."""
    serve = sub.add_parser(
        "serve",
        help="serve the HTTP API with uvicorn",
        description="Serve a FastAPI app with uvicorn; settings come from AGENT_*.",
    )
    serve.add_argument(
        "--app",
        default=os.environ.get("AGENT_APP", DEFAULT_APP),
        help="the app as module:attribute, or a factory returning it (default: $AGENT_APP, "
        f"{DEFAULT_APP}: your project's app/main.py)",
    )
    serve.add_argument("--host", help="address to bind (default: $AGENT_HOST, 127.0.0.1)")
    serve.add_argument(
        "--port", type=_port, help="port to listen on, 1-65535 (default: $AGENT_PORT, 8000)"
    )
    sub.add_parser(
        "migrate",
        help="bring the database to the newest schema",
        description="Run the migrations on $AGENT_DATABASE_URL (default ./agent.db).",
    )
    distribute_ = sub.add_parser(
        "distribute",
        help="distribute a migrated PostgreSQL database with Citus (run on the coordinator)",
        description="Distribute the tables of $AGENT_DATABASE_URL (a Citus coordinator, "
        "migrated first) by thread and by actor, as docs/scale-out.md lays out. Safe to run "
        "again: tables distributed already are left as they are.",
    )
    distribute_.add_argument(
        "--shard-count",
        type=int,
        help="shards per colocation group (default: the server's citus.shard_count, 32)",
    )


def _add_client_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`chat` and `inspect`: clients of a running server."""
    chat_ = sub.add_parser(
        "chat",
        help="chat with an agent on a running server",
        description="Chat with an agent: each line you type is one turn, the answer streams "
        f"back. Ctrl-D quits. Reads lines from stdin when it is not a terminal. {_NEEDS_SERVER}",
    )
    _add_server_options(chat_)
    chat_.add_argument(
        "--agent", help="the agent (default: the server's only agent; required if it has several)"
    )
    chat_.add_argument("--thread", help="continue this thread (default: start a new one)")
    inspect_ = sub.add_parser(
        "inspect",
        help="show what a thread's next turn would send",
        description=f"Show what the next turn of a thread would send the model. {_NEEDS_SERVER}",
    )
    _add_server_options(inspect_)
    inspect_.add_argument("thread", help="the thread's id (chat prints it first)")


def _command(args: argparse.Namespace) -> int:
    if args.command == "migrate":
        return _migrate()
    if args.command == "distribute":
        return _distribute(args.shard_count)
    if args.command in ("chat", "inspect"):
        args.url = args.url or default_url()
        try:
            with _client(args.url, args.api_key) as client:
                if args.command == "inspect":
                    return inspect(client, args.thread, sys.stdout)
                args.agent = args.agent or only_agent(client, args.url)
                lines: Iterable[str] = sys.stdin
                if sys.stdin.isatty():
                    print(
                        f"chatting with {args.agent!r} at {args.url}: type a message and press "
                        "Enter; Ctrl-D to quit",
                        file=sys.stdout,
                    )
                    lines = prompted_lines("you> ", sys.stdout)
                return chat(client, args.agent, args.thread, lines, sys.stdout)
        except httpx.ConnectError as exc:
            _fail(f"no server at {args.url} ({exc}). {_NEEDS_SERVER}")
            return 1
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL: a hostile thread id
            _fail(f"{args.url}: {exc}")
            return 1
    return _serve(args.app, args.host, args.port)
