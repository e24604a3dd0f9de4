"""The request-size limit holds however the body is framed, and memory stays flat.

`Content-Length: 15` together with `Transfer-Encoding: chunked` and a 150 MB chunked body: the
body is framed by its chunks, and the server used to trust the header, read the whole body and
parse it before answering 413 (peak memory 212 MB -> 543 MB for one request). The app runs as a
real process (`python -m app serve`, uvicorn) so its peak RSS (VmHWM) can be read before and
after.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.reliability.processes import App, app_env, post_chunked

KEY = "body-key"
ATTEMPT_BYTES = 150 * 1024 * 1024
CHUNK_BYTES = 1024 * 1024
GROWTH_BOUND_KIB = 5 * 1024
"""Peak RSS may grow by at most this much for the attempt (the body limit itself is ~1.5 MB)."""


async def _smuggle(app: App, path: str) -> tuple[bytes, int]:
    """Send the attack on a raw socket; returns the response head and the bytes sent."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {KEY}\r\n"
        "Content-Type: application/json\r\nContent-Length: 15\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    )
    return await post_chunked(app.port, head, b'{"content":"', ATTEMPT_BYTES, CHUNK_BYTES)


async def test_a_150_mb_body_behind_a_lying_content_length_is_refused_in_flat_memory(
    tmp_path: Path,
) -> None:
    env = app_env(f"sqlite+aiosqlite:///{tmp_path / 'body.db'}", AGENT_API_KEYS=f"{KEY}=alice")
    app = App(env, tmp_path / "server.log")
    await app.start()
    try:
        async with httpx.AsyncClient(
            base_url=app.url, headers={"Authorization": f"Bearer {KEY}"}, trust_env=False
        ) as client:
            created = await client.post("/agents/assistant/threads", json={})
            path = f"/agents/assistant/threads/{created.json()['id']}/messages"
            warm = await client.post(path, json={"content": "warm up"})
            assert warm.status_code == 200, warm.text
            refused = await client.post(path, json={"content": "x" * (300 * 1024)})
            assert refused.status_code == 413, refused.text
        before = app.memory_kib("VmHWM")
        response, sent = await _smuggle(app, path)
        after = app.memory_kib("VmHWM")
        async with httpx.AsyncClient(base_url=app.url, trust_env=False) as client:
            assert (await client.get("/healthz")).status_code == 200  # still serving
    finally:
        await app.stop()
    growth = after - before
    print(
        f"\nbody limit: {sent / 2**20:.0f} MB sent behind Content-Length: 15; peak RSS "
        f"{before / 1024:.1f} -> {after / 1024:.1f} MB (+{growth / 1024:.2f} MB); "
        f"answer {response.splitlines()[0].decode()}"
    )
    assert response.startswith(b"HTTP/1.1 413 "), response
    assert growth < GROWTH_BOUND_KIB, f"peak RSS grew by {growth} KiB"
