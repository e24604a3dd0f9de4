"""The runnable app: `app.main` builds nothing on import, and its `assistant` works."""

from __future__ import annotations

import subprocess
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from app.main import create_app, fake_page
from tests.http.conftest import ALICE, http_settings, open_client


def test_importing_app_main_builds_nothing() -> None:
    code = (
        "import app.main as m\n"
        "assert '_app' in vars(m) and m._app is None\n"
        "print(type(m.app).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"AGENT_DATABASE_URL": "sqlite+aiosqlite:///:memory:", "PATH": ""},
        cwd=Path(__file__).parents[2],
    )
    assert out.stdout.strip() == "FastAPI"


def test_read_page_is_large_and_deterministic() -> None:
    page = fake_page("https://example.org")
    assert 19_000 < len(page) < 21_000
    assert page == fake_page("https://example.org") != fake_page("https://example.com")


async def test_the_assistant_reads_pages_and_counts_words(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    settings = http_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'main.db'}", migrate_on_start=True
    )
    app = create_app(settings)
    client = await open_client(stack, app)
    thread = (await client.post("/agents/assistant/threads", headers=ALICE)).json()
    url = f"/agents/assistant/threads/{thread['id']}/messages"
    page = await client.post(url, headers=ALICE, json={"content": "/read_page https://a.b"})
    assert page.status_code == 200
    assert page.json()["message"]["tool_results"][0]["content"] == fake_page("https://a.b")
    words = await client.post(url, headers=ALICE, json={"content": "/word_count one two three"})
    assert words.json()["message"]["tool_results"][0]["content"] == "3"
    window = (await client.get(f"/threads/{thread['id']}/window", headers=ALICE)).json()
    assert window["read_bound"] == 20  # the default window of the runnable app
    assert (await client.get("/nope")).json()["error"]["code"] == "not_found"  # handlers installed


async def test_the_runnable_app_serves_the_inspector_and_metrics_by_default(
    stack: AsyncExitStack, tmp_path: Path
) -> None:
    settings = http_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'main.db'}", migrate_on_start=True
    )
    client = await open_client(stack, create_app(settings))
    thread = (await client.post("/agents/assistant/threads", headers=ALICE)).json()["id"]
    bare = await client.get("/inspect", headers=ALICE)
    assert bare.status_code == 307 and bare.headers["location"].endswith("/inspect/")
    listing = await client.get("/inspect/", headers=ALICE)
    assert listing.status_code == 200 and thread in listing.text
    assert (await client.get("/metrics")).status_code == 200
    off = await open_client(
        stack, create_app(settings.model_copy(update={"inspector": False, "metrics": False}))
    )
    assert (await off.get("/inspect/", headers=ALICE)).status_code == 404
    assert (await off.get("/metrics")).status_code == 404
