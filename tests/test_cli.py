"""`python -m app serve | chat | inspect` against a real server on loopback, SQLite in tmp_path."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from bounded_agents import cli
from bounded_agents.settings import get_settings

ROOT = Path(__file__).parents[1]
KEY = "key-a"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_")}
    env.update(
        AGENT_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}",
        AGENT_API_KEYS=f"{KEY}=alice",
        AGENT_HISTORY_MAX_MESSAGES="3",
    )
    return env


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """`python -m app serve` in a subprocess (migrating its database at start-up)."""
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port)],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if httpx.get(f"{url}/healthz", trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_chat_streams_answers_and_inspect_shows_the_window(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = "hello from the terminal\n/read_page https://example.org/cli\n\nbye now\n"
    chat = subprocess.run(
        [sys.executable, "-m", "app", "chat", "--url", server],
        input=lines,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**_env(tmp_path), "AGENT_API_KEY": KEY},
        timeout=60,
    )
    assert chat.returncode == 0, chat.stderr
    out = chat.stdout.splitlines()
    assert out[0].startswith("thread ")
    thread_id = out[0].removeprefix("thread ")
    assert 'Echo (saw 2 messages): "hello from the terminal"' in out
    assert '[tool read_page({"url": "https://example.org/cli"})]' in out
    assert any(line.startswith("[tool read_page: 2") and "chars]" in line for line in out)
    assert any("Tool read_page returned" in line for line in out)
    assert any('"bye now"' in line for line in out)

    assert cli.main(["inspect", thread_id, "--url", server, "--api-key", KEY]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == (
        f"thread {thread_id} (agent assistant): the next turn reads the newest 3 messages"
    )
    # header, two kept messages (the next turn's own message takes the third place), totals
    assert len(shown) == 5
    assert "bye now" in shown[1] and "user" in shown[1]
    assert "assistant" in shown[2] and "Echo" in shown[2]
    assert shown[3].startswith("kept 2 messages, ~") and shown[3].endswith("dropped 1")
    assert shown[4] == "your next message takes the window's last place: 2 + 1 = 3 messages sent"


def test_chat_in_process_continues_a_thread(
    server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\n"))
    assert cli.main(["chat", "--url", server, "--api-key", KEY]) == 0
    first = capsys.readouterr().out.splitlines()
    thread_id = first[0].removeprefix("thread ")
    assert first[1] == 'Echo (saw 2 messages): "first line"'

    monkeypatch.setattr(sys, "stdin", io.StringIO("second line\n"))
    assert cli.main(["chat", "--url", server, "--api-key", KEY, "--thread", thread_id]) == 0
    assert capsys.readouterr().out.splitlines() == ['Echo (saw 4 messages): "second line"']


def test_errors_are_reported_not_raised(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", "not-a-thread", "--url", server, "--api-key", KEY]) == 1
    assert "404 thread_not_found" in capsys.readouterr().err
    assert cli.main(["inspect", "x", "--url", server, "--api-key", "wrong"]) == 1
    denied = capsys.readouterr().err
    assert "401 unauthorized" in denied and "AGENT_API_KEY (singular)" in denied
    closed = f"http://127.0.0.1:{_free_port()}"
    assert cli.main(["inspect", "x", "--url", closed]) == 1
    unreachable = capsys.readouterr().err
    assert f"error: no server at {closed}" in unreachable and "make run" in unreachable


@pytest.mark.postgres
def test_migrate_never_prints_the_database_password(
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The test server trusts local connections, so any password gets in: it must not get out."""
    password = "hunter2-migrate-S3CRET"
    url = make_url(postgres_url).set(password=password).render_as_string(hide_password=False)
    monkeypatch.setenv("AGENT_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        assert cli.main(["migrate"]) == 0
    finally:
        get_settings.cache_clear()
    out, err = capsys.readouterr()
    assert password not in out + err + caplog.text
    assert f"postgres:***@{make_url(url).host}" in out


def test_every_option_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("serve", "migrate", "distribute", "chat", "inspect"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = capsys.readouterr().out
        options = text.split("options:")[1]
        lines = [line.strip() for line in options.splitlines() if line.strip()]
        for n, line in enumerate(lines):
            if (
                line.startswith("-") and "  " not in line
            ):  # an option whose help is on the next line
                assert n + 1 < len(lines) and not lines[n + 1].startswith("-"), line


def test_chat_at_a_terminal_prompts_and_quits_on_ctrl_d(
    server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("hi there\n"))
    assert cli.main(["chat", "--url", server, "--api-key", KEY]) == 0
    out = capsys.readouterr().out
    assert "Ctrl-D to quit" in out.splitlines()[0]
    assert out.count("you> ") == 2  # before the message, and before the Ctrl-D that ended it
    assert 'Echo (saw 2 messages): "hi there"' in out


def test_ctrl_c_exits_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_command", interrupted)
    assert cli.main(["chat"]) == 130
    assert "Traceback" not in capsys.readouterr().err


def _serve_once(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m app serve` with `env` on top of the test environment, expected to stop."""
    return subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", str(_free_port())],
        cwd=ROOT,
        env={**_env(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_with_a_bad_setting_stops_with_one_line_naming_it(tmp_path: Path) -> None:
    """Found by attack: every bad setting stopped start-up with a 27-line traceback ending in
    pydantic's text, which named the Python field and quoted other settings' values."""
    done = _serve_once(
        tmp_path,
        AGENT_SWEEP_SECONDS="garbage",
        AGENT_DBOS_SYSTEM_DATABASE_URL="postgresql://app:s3cr3t@db/x",
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: invalid settings: AGENT_SWEEP_SECONDS: Input should be a valid number, "
        "unable to parse string as a number"
    ]


@pytest.mark.parametrize("command", ["serve", "migrate"])
@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("AGENT_API_KEYS", "s3cr3t", "AGENT_API_KEYS: pair 1 is not key=actor"),
        ("AGENT_API_KEYS", "s3cr3t=alice,s3cr3t=bob", "AGENT_API_KEYS: pair 2 repeats"),
        ("AGENT_API_KEYS", "", "AGENT_API_KEYS: set but names no key=actor pair"),
        (
            "AGENT_DATABASE_URL",
            "postgresql://app:s3cr3t@127.0.0.1/x",
            "AGENT_DATABASE_URL: postgresql:// lacks the app's driver: write postgresql+asyncpg://",
        ),
        (
            "AGENT_DATABASE_URL",
            "sqlite:///./nowhere.db",
            "AGENT_DATABASE_URL: sqlite:// lacks the app's driver: write sqlite+aiosqlite://",
        ),
    ],
    ids=[
        "key-without-actor",
        "repeated-key",
        "empty-key-list",
        "postgresql-without-asyncpg",
        "sqlite-without-driver",
    ],
)
def test_a_bad_key_list_or_driver_stops_serve_and_migrate_with_one_line(
    tmp_path: Path, command: str, variable: str, value: str, says: str
) -> None:
    """Found by attack: `AGENT_API_KEYS=key1` was a 24-line traceback, exit 1, from `serve`
    (and `migrate` went on regardless); a repeated key was taken; `postgresql://` said only
    `ModuleNotFoundError`. docs/settings.md promises one line and exit 2 for a bad setting; the
    line never shows the key."""
    args = [sys.executable, "-m", "app", command]
    done = subprocess.run(
        args + (["--port", str(_free_port())] if command == "serve" else []),
        cwd=ROOT,
        env={**_env(tmp_path), variable: value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: invalid settings: {says}"), line
    assert "s3cr3t" not in line


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_an_unreachable_database_is_one_line_without_its_password(
    tmp_path: Path, command: str
) -> None:
    """Found by attack: 143 lines of uvicorn's start-up traceback."""
    url = f"postgresql+asyncpg://app:s3cr3t-pw@127.0.0.1:{_free_port()}/nowhere"
    args = [sys.executable, "-m", "app", command]
    done = subprocess.run(
        args + (["--port", str(_free_port())] if command == "serve" else []),
        cwd=ROOT,
        env={**_env(tmp_path), "AGENT_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: cannot reach the database at postgresql+asyncpg://app:***@")
    assert "s3cr3t" not in done.stdout + done.stderr


def test_pgbouncer_on_sqlite_is_said_not_silently_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from app.main import create_app
    from bounded_agents.settings import Settings

    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'b.db'}", db_pgbouncer=True)
    with caplog.at_level("WARNING", logger="bounded_agents"):
        create_app(settings)
    assert "AGENT_DB_PGBOUNCER is ignored" in caplog.text


# --- what the CLI prints from the server is escaped -----------------------------------------

HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x07\x1b[2K\x9b1J\r\x7f"
"""What a prompt-injected page can make a model say: OSC 52 writes the clipboard, OSC 0 sets
the window title, CSI erases (ESC [ and the 8-bit CSI), a carriage return overwrites."""
HOSTILE_SHOWN = "\\x1b]52;c;cHduZWQ=\\x07\\x1b]0;owned\\x07\\x1b[2K\\x9b1J\\x0d\\x7f"
_RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Any control character but tab and newline."""


def _sse(*events: tuple[str, dict[str, object]]) -> bytes:
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def _hostile_server(request: httpx.Request) -> httpx.Response:
    """Every field the CLI prints, holding escape sequences."""
    path = request.url.path
    if path == "/agents/evil/threads":
        return httpx.Response(201, json={"id": f"t{HOSTILE}"})
    if path.endswith("/messages"):
        body = _sse(
            ("delta", {"text": f"model says {HOSTILE}\n\tindented\n"}),
            ("tool_call", {"id": "c1", "name": f"read{HOSTILE}", "arguments": {"u": HOSTILE}}),
            (
                "tool_result",
                {"call_id": "c1", "name": HOSTILE, "is_error": True, "content_chars": 3},
            ),
            ("error", {"error": {"code": f"x{HOSTILE}", "message": f"failed {HOSTILE}"}}),
        )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
    if path == "/threads/evil/window":
        kept = {"seq": 1, "role": HOSTILE, "tokens": HOSTILE, "content": HOSTILE, "tool_calls": []}
        window = {
            "thread_id": HOSTILE,
            "agent": HOSTILE,
            "read_bound": HOSTILE,
            "kept": [kept],
            "summarizes": False,
            "total_tokens": HOSTILE,
            "dropped_count": HOSTILE,
        }
        return httpx.Response(200, json=window)
    if path == "/threads/json-error/window":
        return httpx.Response(404, json={"error": {"code": HOSTILE, "message": HOSTILE}})
    return httpx.Response(502, text=f"<html>{HOSTILE}</html>")


def _hostile_client() -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(_hostile_server), base_url="http://evil")


def _assert_escaped(text: str, times: int) -> None:
    assert not _RAW_CONTROL.search(text), repr(text)
    assert text.count(HOSTILE_SHOWN) >= times, text


def test_chat_escapes_control_characters_in_everything_it_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()
    with _hostile_client() as client:
        assert cli.chat(client, "evil", None, [], out) == 0  # a new thread, its id printed
        assert cli.chat(client, "evil", "t1", ["hi\n"], out) == 1  # the turn ended in an error
        assert cli.chat(client, "nobody", None, ["hi\n"], out) == 1  # a non-JSON error page
    printed, err = out.getvalue(), capsys.readouterr().err
    # thread id, model text, tool name and its arguments (JSON escapes those), result's name
    _assert_escaped(printed, times=4)
    assert "\n\tindented\n" in printed  # layout is kept
    _assert_escaped(err, times=3)  # the error event's code and message, the error page
    assert f"error: x{HOSTILE_SHOWN}: failed {HOSTILE_SHOWN}" in err


def test_a_hostile_agents_page_reaches_the_terminal_escaped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`chat` without `--agent` asks `GET /agents`; a server answering it with an error page
    holding escape sequences is quoted in the refusal, which `main` prints escaped."""
    hostile = _hostile_client()
    monkeypatch.setattr(cli.httpx, "Client", lambda **kw: hostile)
    assert cli.main(["chat", "--url", "http://evil"]) == 2
    err = capsys.readouterr().err
    _assert_escaped(err, times=1)
    assert err.startswith("error: http://evil: cannot list its agents (502: <html>")


def test_inspect_escapes_control_characters_in_everything_it_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()
    with _hostile_client() as client:
        assert cli.inspect(client, "evil", out) == 0
        assert cli.inspect(client, "json-error", out) == 1
        assert cli.inspect(client, "missing", out) == 1
    printed, err = out.getvalue(), capsys.readouterr().err
    _assert_escaped(printed, times=7)  # id, agent, bound, role, tokens, content, totals
    _assert_escaped(err, times=3)


def test_a_model_answer_with_escape_sequences_reaches_the_terminal_escaped(
    server: str, tmp_path: Path
) -> None:
    """End to end: EchoModel repeats the line, as a model repeats what a page told it (all
    but the carriage return, which stdin's text mode reads as a line end)."""
    chat = subprocess.run(
        [sys.executable, "-m", "app", "chat", "--url", server],
        input=f"say {HOSTILE}\n".replace("\r", ""),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**_env(tmp_path), "AGENT_API_KEY": KEY},
        timeout=60,
    )
    assert chat.returncode == 0, chat.stderr
    said = HOSTILE_SHOWN.replace("\\x0d", "")
    assert f'"say {said}"' in chat.stdout
    assert not _RAW_CONTROL.search(chat.stdout)
    thread_id = chat.stdout.splitlines()[0].removeprefix("thread ")
    shown = subprocess.run(
        [sys.executable, "-m", "app", "inspect", thread_id, "--url", server, "--api-key", KEY],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(tmp_path),
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert said in shown.stdout and not _RAW_CONTROL.search(shown.stdout)


# --- where chat and inspect look, and what they say when nothing is there -------------------


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """`monkeypatch` whose AGENT_* variables `get_settings()` reads afresh, none inherited."""
    for name in [k for k in os.environ if k.startswith("AGENT_")]:
        monkeypatch.delenv(name)
    get_settings.cache_clear()
    yield monkeypatch
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.2", "http://127.0.0.2:{port}"),
        ("0.0.0.0", "http://127.0.0.1:{port}"),  # bound to every address: reached on loopback
        ("::1", "http://[::1]:{port}"),
    ],
)
def test_default_url_is_where_serve_would_listen_by_agent_host_and_agent_port(
    environment: pytest.MonkeyPatch, host: str, url: str
) -> None:
    environment.setenv("AGENT_HOST", host)
    environment.setenv("AGENT_PORT", "8123")
    assert cli.default_url() == url.format(port=8123)


@pytest.mark.parametrize("command", [["chat"], ["inspect", "some-thread"]])
def test_chat_and_inspect_default_to_agent_host_and_port_and_name_url_when_nothing_answers(
    environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    port = _free_port()  # closed: nothing listens there
    environment.setenv("AGENT_HOST", "127.0.0.1")
    environment.setenv("AGENT_PORT", str(port))
    environment.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert cli.main(command) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: no server at http://127.0.0.1:{port} "), line
    assert "--url" in line and "bounded-agents serve" in line, line


def test_serve_with_an_app_that_cannot_be_loaded_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """Not uvicorn's (nor importlib's) traceback: the line names the target and `--app`."""
    for target, says in [
        ("no_such_module_xyz:app", "cannot import 'no_such_module_xyz' for no_such_module_xyz:app"),
        ("app.main:no_such_attr", "'app.main' has no 'no_such_attr' for app.main:no_such_attr"),
        ("app.main", "--app 'app.main' is not module:attribute"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "app", "serve", "--app", target, "--port", str(_free_port())],
            cwd=ROOT,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith(f"error: {says}"), line


def test_a_thread_id_with_control_characters_from_a_hostile_server_is_one_escaped_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The hostile server names the new thread `t<escape sequences>`. The turn's URL holds it
    as one escaped path segment (it was sent raw, and httpx refused the URL); whatever comes
    back is printed escaped, and the turn's error event ends the command, never a traceback."""
    seen: list[str] = []

    def recorded(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return _hostile_server(request)

    monkeypatch.setattr(
        cli,
        "_client",
        lambda _url, _key: httpx.Client(
            transport=httpx.MockTransport(recorded), base_url="http://evil"
        ),
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    assert cli.main(["chat", "--agent", "evil", "--url", "http://evil"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == f"thread t{HOSTILE_SHOWN}"
    assert seen[1].startswith("/agents/evil/threads/t%1B") and seen[1].endswith("/messages")
    assert not _RAW_CONTROL.search(out + err) and "Traceback" not in err


# --- which agent chat talks to ---------------------------------------------------------------


def _agents_server(names: list[str], seen: list[str]) -> httpx.Client:
    """A server whose `GET /agents` lists `names`; it records each request's method and path."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path == "/agents":
            return httpx.Response(200, json={"agents": [{"name": n} for n in names]})
        return httpx.Response(201, json={"id": "t1"})

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="http://s")


@pytest.mark.parametrize("only", ["helper", "assistant"])
def test_chat_without_agent_talks_to_the_only_agent_the_server_has(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], only: str
) -> None:
    """Issue 40: `--agent` defaulted to `assistant`, the demo's agent, in a project whose only
    agent is another one (a 404 `agent_not_found` at the first line)."""
    seen: list[str] = []
    monkeypatch.setattr(cli, "_client", lambda _url, _key: _agents_server([only], seen))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli.main(["chat", "--url", "http://s"]) == 0
    assert seen == ["GET /agents", f"POST /agents/{only}/threads"]
    assert capsys.readouterr().out.splitlines() == ["thread t1"]


def test_chat_without_agent_on_a_server_of_several_exits_2_naming_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(cli, "_client", lambda _url, _key: _agents_server(["b", "a"], seen))
    monkeypatch.setattr(sys, "stdin", io.StringIO("hi\n"))
    assert cli.main(["chat", "--url", "http://s"]) == 2
    assert seen == ["GET /agents"]  # no thread started
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == "error: http://s serves 2 agents, 'a' and 'b': choose one with --agent", line


def test_chat_with_agent_asks_no_list(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(cli, "_client", lambda _url, _key: _agents_server(["a", "b"], seen))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli.main(["chat", "--url", "http://s", "--agent", "b"]) == 0
    assert seen == ["POST /agents/b/threads"]


# --- a stream that ends early, and names that are not path segments --------------------------


def _cut_server(seen: list[str]) -> httpx.Client:
    """A server whose turn stream sends one delta and then ends, with no `done` or `error`
    event (a proxy cut it, or the server stopped); it records each request's raw path."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        if request.url.path.endswith("/threads"):
            return httpx.Response(201, json={"id": "t1"})
        body = _sse(("delta", {"text": "half an ans"}))
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx.Client(transport=httpx.MockTransport(answer), base_url="http://s")


def test_a_stream_that_ends_without_done_or_error_is_one_line_saying_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Found by attack: the turn exited 1 with nothing said after the partial answer."""
    out = io.StringIO()
    with _cut_server([]) as client:
        assert cli.chat(client, "helper", "t1", ["hi\n"], out) == 1
    assert out.getvalue() == "half an ans\n"  # the line ended before the error
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: the answer stream ended before the turn did"), line


def test_agent_and_thread_names_are_sent_as_one_path_segment_each() -> None:
    """Found by attack: `--agent`/`--thread` went into the URL path as typed, so a name with
    `/`, `?` or `#` reached another route (or cut the path)."""
    seen: list[str] = []
    with _cut_server(seen) as client:
        cli.chat(client, "a/b?c", "t/../x#y", ["hi\n"], io.StringIO())
        cli.chat(client, "a/b?c", None, [], io.StringIO())
    assert seen == [
        "/agents/a%2Fb%3Fc/threads/t%2F..%2Fx%23y/messages",
        "/agents/a%2Fb%3Fc/threads",
    ]
