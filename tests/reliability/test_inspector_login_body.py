"""`POST /inspect/login` is the one route an anonymous caller can send a body to without any
key. It read that body whole (`await request.body()`, then `parse_qs` over its text: +834 MB of
peak memory for one 150 MB form, then a 401). Now a body over `LOGIN_BODY_LIMIT` (8 KiB; the
form holds one key) is a 413 before it is read, as the API routes refuse a body over
`request_body_limit` (tests/reliability/test_body_limit.py)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.reliability.processes import App, app_env, post_chunked

KEY = "login-key"
ATTEMPT_BYTES = 150 * 1024 * 1024
CHUNK_BYTES = 1024 * 1024
GROWTH_BOUND_KIB = 5 * 1024


async def _post_form(app: App, total: int) -> tuple[bytes, int]:
    """An anonymous form POST to /inspect/login of `total` bytes, chunked; the answer's head."""
    head = (
        "POST /inspect/login HTTP/1.1\r\nHost: test\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return await post_chunked(app.port, head, b"key=", total, CHUNK_BYTES)


async def test_an_anonymous_150_mb_login_form_is_refused_413_in_flat_memory(
    tmp_path: Path,
) -> None:
    env = app_env(f"sqlite+aiosqlite:///{tmp_path / 'login.db'}", AGENT_API_KEYS=f"{KEY}=alice")
    app = App(env, tmp_path / "server.log")
    await app.start()
    try:
        async with httpx.AsyncClient(base_url=app.url, trust_env=False) as client:
            ok = await client.post(
                "/inspect/login",
                content=f"key={KEY}",
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            assert ok.status_code == 303, ok.text  # the form works
        before = app.memory_kib("VmHWM")
        head, sent = await _post_form(app, ATTEMPT_BYTES)
        after = app.memory_kib("VmHWM")
    finally:
        await app.stop()
    growth = after - before
    print(
        f"\n/inspect/login: {sent / 2**20:.0f} MB anonymous form; peak RSS "
        f"{before / 1024:.1f} -> {after / 1024:.1f} MB (+{growth / 1024:.1f} MB); "
        f"answer {head.splitlines()[0].decode()}"
    )
    assert growth < GROWTH_BOUND_KIB, f"peak RSS grew by {growth / 1024:.0f} MB for one request"
    assert head.startswith(b"HTTP/1.1 413 "), head
