"""`python -m bench.integrations` runs, and shows what it is for: the adapters' reads stay at
the bound while the frameworks' own stores read the whole thread."""

from __future__ import annotations

import json
from pathlib import Path

from bench.integrations import KEEP_RUNS, main


def test_the_integrations_bench_reads_the_bound_beside_the_whole_thread(tmp_path: Path) -> None:
    out = tmp_path / "integrations.json"
    assert (
        main(["--backends", "sqlite", "--lengths", "40,80", "--reps", "2", "--json", str(out)]) == 0
    )
    rows = json.loads(out.read_text())
    assert {r["framework"] for r in rows} == {"openai-agents", "pydantic-ai", "langchain"}
    assert len(rows) == 3 * 2 * 2  # frameworks x lengths x (ours, theirs)
    for r in rows:
        if r["system"].startswith("bounded-agents"):
            # five runs of four items, at 40 and 80; Pydantic AI's load also reads the first
            # request back (its system prompts) once the first run has left the view
            opening = 1 if r["framework"] == "pydantic-ai" else 0
            assert r["rows_read"] == KEEP_RUNS * 4 + opening, r
        else:
            assert r["rows_read"] >= r["items"]  # the whole thread, and the turns added to it
