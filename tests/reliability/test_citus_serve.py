"""`python -m app serve` on a Citus cluster (a coordinator and two workers), set up the way
docs/scale-out.md tells an operator to: `python -m app migrate`, `python -m app distribute`,
then serve on the coordinator. A newcomer's path through it: start-up (its sweep included), a
thread, ten turns with a tool call and a fold, the window, the OpenAI-compatible API, the
inspector. And the thread's rows are on a worker, not on the coordinator.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import asyncpg
import httpx
import pytest

from bounded_agents.store.distribute import PLAN
from tests.citus_cluster import CitusCluster
from tests.conftest import CITUS_SHARDS
from tests.reliability.processes import ROOT, App, app_env

pytestmark = pytest.mark.citus

KEY = "citus-key"
HEADERS = {"Authorization": f"Bearer {KEY}"}


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


async def _shard_ports(url: str, thread_id: str) -> set[int]:
    """The ports of the nodes that hold the thread's rows, table by table."""
    conn = await asyncpg.connect(url.replace("+asyncpg", ""))
    try:
        rows = await conn.fetch(
            "SELECT s.nodeport FROM citus_shards s WHERE s.shardid IN ("
            "SELECT get_shard_id_for_distribution_column(t, $1::text) FROM unnest("
            "ARRAY['threads', 'messages', 'runs', 'run_steps', 'thread_summaries']::regclass[]"
            ") AS t)",
            thread_id,
        )
    finally:
        await conn.close()
    return {r["nodeport"] for r in rows}


async def test_serve_on_a_citus_cluster_takes_a_newcomer_through_every_page(
    citus_cluster: CitusCluster, tmp_path: Path
) -> None:
    url = await citus_cluster.create_database("agent_serve")
    env = app_env(
        url,
        AGENT_API_KEYS=f"{KEY}=alice",
        AGENT_HISTORY_MAX_MESSAGES="6",
        AGENT_HISTORY_SUMMARIZE="true",
    )
    assert "database at head" in await asyncio.to_thread(_cli, env, "migrate")
    distributed = await asyncio.to_thread(
        _cli, env, "distribute", "--shard-count", str(CITUS_SHARDS)
    )
    sharded = [d.table for d in PLAN if d.column]
    assert distributed.count(": distributed by ") == len(sharded) == 9, distributed
    app = App(env, tmp_path / "serve.log")
    try:
        await app.start()  # migrate-on-start (at head) and the start-up sweep ran
        async with httpx.AsyncClient(
            base_url=app.url, headers=HEADERS, trust_env=False, timeout=30
        ) as client:
            created = await client.post("/agents/assistant/threads", json={"title": "citus"})
            assert created.status_code == 201, created.text
            thread = created.json()["id"]
            reports = []
            for i in range(10):
                content = "/read_page https://example.org/citus" if i == 2 else f"question {i}"
                answered = await client.post(
                    f"/agents/assistant/threads/{thread}/messages", json={"content": content}
                )
                assert answered.status_code == 200, answered.text + app.log.read_text()
                reports.append(answered.json()["report"])
            steps = [
                (await client.get(f"/runs/{r['run_id']}")).json() for r in reports
            ]  # by run id alone: the one lookup that reaches every shard
            assert all(s["run_id"] == r["run_id"] for s, r in zip(steps, reports, strict=True))
            messages = (await client.get(f"/threads/{thread}/messages")).json()["messages"]
            assert [m["role"] for m in messages] == ["user", "assistant"] * 10
            assert messages[5]["tool_results"][0]["content"].startswith(
                "# https://example.org/citus"
            ), "the tool's answer is stored with its turn"
            assert any((r["summary"] or {}).get("made") for r in reports), reports[-1]

            window = await client.get(f"/threads/{thread}/window")
            assert window.status_code == 200, window.text
            shown = window.json()
            assert shown["summary"]["covers_through_seq"] > 0 and shown["kept"], shown

            response = await client.post(
                "/v1/responses", json={"conversation": thread, "input": "and over /v1?"}
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["status"] == "completed" and body["output"], body
            again = await client.get(f"/v1/responses/{body['id']}")
            assert again.status_code == 200 and again.json()["id"] == body["id"]
            followed = await client.post(
                "/v1/responses", json={"previous_response_id": body["id"], "input": "go on"}
            )
            assert followed.status_code == 200, followed.text

            page = await client.get(f"/inspect/threads/{thread}")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert all(r["run_id"] in page.text for r in reports[-3:])
            listing = await client.get("/inspect/")
            assert listing.status_code == 200 and thread in listing.text
            run_page = await client.get(f"/inspect/runs/{reports[2]['run_id']}")
            assert run_page.status_code == 200, run_page.text
    finally:
        await app.stop()
    log = app.log.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log
    worker_ports = {w.port for w in citus_cluster.workers}
    assert await _shard_ports(url, thread) <= worker_ports


async def test_serve_connected_to_a_worker_answers_too(
    citus_cluster: CitusCluster, citus_url: str, tmp_path: Path
) -> None:
    """Citus keeps its metadata on every worker, so a process may connect to a worker instead
    of the coordinator (docs/scale-out.md): turns, the window and the start-up sweep work
    there. Migrations stay the coordinator's (`alembic_version` is a table of its own there):
    such a process runs with AGENT_MIGRATE_ON_START=false."""
    database = citus_url.rsplit("/", 1)[1]
    env = app_env(
        citus_cluster.workers[0].url(database),
        AGENT_API_KEYS=f"{KEY}=alice",
        AGENT_MIGRATE_ON_START="false",
    )
    app = App(env, tmp_path / "worker.log")
    try:
        await app.start()
        async with httpx.AsyncClient(
            base_url=app.url, headers=HEADERS, trust_env=False, timeout=30
        ) as client:
            thread = (await client.post("/agents/assistant/threads", json={})).json()["id"]
            for content in ["hello worker", "/read_page https://example.org/worker"]:
                answered = await client.post(
                    f"/agents/assistant/threads/{thread}/messages", json={"content": content}
                )
                assert answered.status_code == 200, answered.text + app.log.read_text()
            window = await client.get(f"/threads/{thread}/window")
            assert window.status_code == 200 and len(window.json()["kept"]) == 4, window.text
    finally:
        await app.stop()
    assert "Traceback" not in app.log.read_text()
