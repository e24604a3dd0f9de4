"""The command line. Argument parsing only; the work is done by the store, the module, or
(for `chat` and `inspect`) a running server reached over HTTP."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import httpx

from app.redact import redacted_url
from app.settings import get_settings

DEFAULT_URL = "http://127.0.0.1:8000"
PREVIEW_CHARS = 80


def _migrate() -> int:
    from app.store import SqlAgentStore

    settings = get_settings()

    async def run() -> None:
        store = SqlAgentStore.from_url(settings.database_url)
        try:
            await store.create_schema()
        finally:
            await store.dispose()

    asyncio.run(run())
    print(f"database at head: {redacted_url(settings.database_url)}")
    return 0


def _serve(host: str | None, port: int | None) -> int:
    import uvicorn

    settings = get_settings()
    uvicorn.run("app.main:app", host=host or settings.host, port=port or settings.port)
    return 0


# --- talking to a running server -----------------------------------------------------------


def _client(url: str, api_key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # No read timeout: a turn streams for as long as the model takes.
    timeout = httpx.Timeout(10.0, read=None)
    return httpx.Client(base_url=url, headers=headers, timeout=timeout, trust_env=False)


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{response.status_code} {error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{response.status_code}: {response.text[:200]}"


def chat(
    client: httpx.Client,
    agent: str,
    thread_id: str | None,
    lines: Iterable[str],
    out: TextIO,
) -> int:
    """Post each line as a turn and print the answer as it streams in."""
    if thread_id is None:
        created = client.post(f"/agents/{agent}/threads", json={})
        if created.status_code != 201:
            print(f"error: {_error_text(created)}", file=sys.stderr)
            return 1
        thread_id = created.json()["id"]
        print(f"thread {thread_id}", file=out, flush=True)
    status = 0
    for line in lines:
        content = line.rstrip("\n")
        if not content.strip():
            continue
        if not _turn(client, agent, thread_id, content, out):
            status = 1
    return status


def _turn(client: httpx.Client, agent: str, thread_id: str, content: str, out: TextIO) -> bool:
    from app.http.sse import iter_sse

    path = f"/agents/{agent}/threads/{thread_id}/messages"
    headers = {"Accept": "text/event-stream"}
    with client.stream("POST", path, json={"content": content}, headers=headers) as response:
        if response.status_code != 200:
            response.read()
            print(f"error: {_error_text(response)}", file=sys.stderr)
            return False
        at_line_start = True
        for event, data in iter_sse(response.iter_lines()):
            payload: dict[str, Any] = json.loads(data)
            if event == "delta":
                out.write(payload["text"])
                out.flush()
                at_line_start = payload["text"].endswith("\n")
                continue
            if not at_line_start:
                out.write("\n")
                at_line_start = True
            if event == "tool_call":
                args = json.dumps(payload["arguments"], ensure_ascii=False)
                print(f"[tool {payload['name']}({args})]", file=out, flush=True)
            elif event == "tool_result":
                flag = " error" if payload["is_error"] else ""
                print(
                    f"[tool {payload['name']}{flag}: {payload['content_chars']} chars]",
                    file=out,
                    flush=True,
                )
            elif event == "error":
                error = payload["error"]
                print(f"error: {error['code']}: {error['message']}", file=sys.stderr)
                return False
            elif event == "done":
                return True
    return False


def inspect(client: httpx.Client, thread_id: str, out: TextIO) -> int:
    """Print what the thread's next turn would send the model."""
    response = client.get(f"/threads/{thread_id}/window")
    if response.status_code != 200:
        print(f"error: {_error_text(response)}", file=sys.stderr)
        return 1
    window = response.json()
    bound = window["read_bound"] if window["read_bound"] is not None else "whole thread"
    print(f"thread {window['thread_id']} (agent {window['agent']}, read bound {bound})", file=out)
    for m in window["kept"]:
        text = " ".join(m["content"].split())[:PREVIEW_CHARS]
        calls = f" +{len(m['tool_calls'])} tool call(s)" if m["tool_calls"] else ""
        print(f"  {m['seq']!s:>5} {m['role']:<9} {m['tokens']:>6} tok  {text}{calls}", file=out)
    summary = ", folded into a summary" if window["summarizes"] else ""
    print(
        f"kept {len(window['kept'])} messages, ~{window['total_tokens']} tokens; "
        f"dropped {window['dropped_count']}{summary}",
        file=out,
    )
    return 0


# --- arguments -----------------------------------------------------------------------------


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("AGENT_API_KEY"),
        help="bearer key (default: $AGENT_API_KEY; none in local development mode)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the HTTP API with uvicorn")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    sub.add_parser("migrate", help="bring the database to the newest schema")
    chat_ = sub.add_parser("chat", help="chat with an agent on a running server (stdin lines)")
    _add_server_options(chat_)
    chat_.add_argument("--agent", default="assistant")
    chat_.add_argument("--thread", help="continue this thread (default: start a new one)")
    inspect_ = sub.add_parser("inspect", help="show what a thread's next turn would send")
    _add_server_options(inspect_)
    inspect_.add_argument("thread")
    args = parser.parse_args(argv)
    if args.command == "migrate":
        return _migrate()
    if args.command in ("chat", "inspect"):
        try:
            with _client(args.url, args.api_key) as client:
                if args.command == "chat":
                    return chat(client, args.agent, args.thread, sys.stdin, sys.stdout)
                return inspect(client, args.thread, sys.stdout)
        except httpx.HTTPError as exc:
            print(f"error: {args.url}: {exc}", file=sys.stderr)
            return 1
    return _serve(args.host, args.port)
