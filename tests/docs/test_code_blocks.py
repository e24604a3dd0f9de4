"""Every fenced block of README.md, docs/*.md and bench/README.md is run, so the docs cannot
drift from the code. The convention a doc writer follows:

- ```python: run as a script of its own (the tests' venv python, cwd a scratch directory,
  PYTHONPATH the repository, AGENT_DATABASE_URL a fresh migrated SQLite file, the offline
  model); it must exit 0 within 60 s.
- ```sh, ```bash, ```console: run by `bash -euo pipefail` (console: only the `$ ` lines, and
  the `> ` continuations of a line ending in a backslash), against the demo app
  (`app.main:create_app`, agent `assistant`) that this session serves with uvicorn; must exit
  0 within 60 s. PATH starts with the venv's bin, `.venv` in the scratch cwd is that venv,
  AGENT_HOST/AGENT_PORT name the server, so `python -m app chat` reaches it.
- In every run block, `http://127.0.0.1:8000`, `127.0.0.1:8000` and `localhost:8000` are
  rewritten to the server's address (python blocks too: the openai SDK example talks to it).
- `<!-- not run: reason -->` right above a block (blank lines allowed; the comment may wrap)
  and it is not run: no test case at all, since a skip would read as coverage. The reason must
  not be empty, and a marker must stand above a block.
- ```text, ```json, ```http, ```yaml, ```toml, ```dockerfile, ```mermaid and untagged blocks
  are shown, never run; any other tag fails `test_every_block_has_a_language_tag_...`.

One case per run block, its id `file:line` (the opening fence's line). A block's `curl -s`
that gets a 404 still exits 0: make such a block fail on its own (`curl -f`, `jq -e`) where
the status matters.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import (
    Block,
    console_blocks_without_command,
    doc_files,
    markers_marking_nothing,
    markers_without_reason,
    read_docs,
    unknown_tags,
)
from tests.docs.execute import Target, failure, run_block
from tests.docs.server import REPO, VENV, block_env, copy_database

DOCS = read_docs(REPO)
RUN = [block for block in DOCS.blocks if block.runs]


@pytest.mark.parametrize("block", RUN, ids=[block.id for block in RUN])
def test_the_block_exits_zero(
    block: Block, template_database: Path, demo_target: Target, tmp_path: Path
) -> None:
    database = copy_database(template_database, tmp_path / "db")
    outcome = run_block(
        block,
        workdir=tmp_path / "block",
        env=block_env(database, demo_target),
        target=demo_target,
        venv=VENV,
    )
    if not outcome.ok:  # the block's own output, not a repr of the Outcome, is what helps
        pytest.fail(failure(block, outcome, target=demo_target), pytrace=False)


def test_every_block_has_a_language_tag_the_convention_knows() -> None:
    unknown = unknown_tags(DOCS.blocks)
    assert not unknown, (
        "blocks tagged with a language the docs convention does not know (python, sh, bash, "
        "console run; text, json, http, yaml, toml, dockerfile, mermaid and untagged are "
        f"illustrations): {unknown}"
    )


def test_every_console_block_has_a_command_to_run() -> None:
    empty = console_blocks_without_command(DOCS.blocks)
    assert not empty, f"```console blocks with no `$ ` line (tag output as text): {empty}"


def test_every_not_run_marker_says_why() -> None:
    empty = markers_without_reason(DOCS.markers)
    assert not empty, f"`<!-- not run: reason -->` markers with no reason: {empty}"


def test_every_not_run_marker_stands_right_above_a_block() -> None:
    stray = markers_marking_nothing(DOCS.markers)
    assert not stray, (
        "`not run` markers with no code block right below them (only blank lines may sit "
        f"between): {stray}"
    )


def test_every_document_the_convention_names_is_read_and_has_blocks() -> None:
    """A moved or renamed document, or a scanner that stopped seeing fences, would otherwise
    leave the block tests green with nothing to run."""
    paths = [path.relative_to(REPO).as_posix() for path in doc_files(REPO)]
    assert "README.md" in paths and "bench/README.md" in paths
    assert any(path.startswith("docs/") for path in paths)
    missing = [path for path in paths if not (REPO / path).is_file()]
    assert not missing, f"documents missing: {missing}"
    with_blocks = {block.path for block in DOCS.blocks}
    assert "README.md" in with_blocks
    assert any(block.kind == "python" for block in RUN)
    assert any(block.kind == "shell" for block in RUN)
