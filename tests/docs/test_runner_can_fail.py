"""The runner itself: a block that fails, a tag nobody knows and a marker without a reason are
each caught, so a green tests/docs means the docs ran, not that the runner looked away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs.blocks import (
    Block,
    console_blocks_without_command,
    markers_marking_nothing,
    markers_without_reason,
    parse,
    pointed_at,
    shell_script,
    unknown_tags,
)
from tests.docs.execute import Outcome, failure, run_block
from tests.docs.server import VENV, block_env

SAMPLE = """\
# A page

```python
raise SystemExit("python fails")
```

```sh
false | true   # pipefail makes the pipeline fail
echo "not reached"
```

```pyhton
print("a typo")
```

<!-- not run: -->

```sh
exit 1
```

<!-- not run: because it installs -->
```sh
exit 1
```

<!-- not run: nothing below it -->
Some prose.

```python
print("python passes")
```

```console
$ echo "shell passes" \\
>   && test -d .
shell passes
```

```json
{"an": "illustration"}
```
"""


def sample() -> dict[int, Block]:
    return {block.line: block for block in parse("sample.md", SAMPLE).blocks}


def run(block: Block, tmp_path: Path, timeout: float = 30) -> Outcome:
    database = tmp_path / "unused.db"  # these blocks never open it
    return run_block(block, workdir=tmp_path / "w", env=block_env(database, None), timeout=timeout)


def test_the_scanner_finds_each_block_with_its_line_language_and_marker() -> None:
    blocks = sample()
    assert {line: block.lang for line, block in blocks.items()} == {
        3: "python",
        7: "sh",
        12: "pyhton",
        18: "sh",
        23: "sh",
        30: "python",
        34: "console",
        40: "json",
    }
    assert [line for line, block in blocks.items() if block.runs] == [3, 7, 30, 34]
    assert blocks[18].marker is not None and blocks[18].marker.reason == ""
    assert blocks[23].marker is not None and blocks[23].marker.reason == "because it installs"
    assert blocks[3].id == "sample.md:3"


def test_a_failing_python_block_is_reported_with_its_output(tmp_path: Path) -> None:
    block = sample()[3]
    outcome = run(block, tmp_path)
    assert not outcome.ok
    assert "python fails" in outcome.output
    assert failure(block, outcome).startswith("sample.md:3 (```python) exited 1")


def test_a_failing_pipeline_fails_its_shell_block(tmp_path: Path) -> None:
    outcome = run(sample()[7], tmp_path)
    assert not outcome.ok
    assert "not reached" not in outcome.output


def test_blocks_that_pass_pass(tmp_path: Path) -> None:
    """The control: without it, a runner failing everything would pass the tests above."""
    python = run(sample()[30], tmp_path / "py")
    console = run(sample()[34], tmp_path / "console")
    assert (python.ok, python.output) == (True, "python passes\n")
    assert (console.ok, console.output) == (True, "shell passes\n")


def test_a_block_past_its_deadline_is_killed_and_fails(tmp_path: Path) -> None:
    block = Block("sample.md", 1, "sh", "sleep 30\n")
    outcome = run(block, tmp_path, timeout=0.5)
    assert outcome.returncode is None
    assert "was killed after 0.5 s" in failure(block, outcome, timeout=0.5)


def test_an_unknown_language_tag_is_caught() -> None:
    assert unknown_tags(tuple(sample().values())) == ["sample.md:12 ```pyhton"]


def test_a_marker_without_a_reason_and_a_marker_above_no_block_are_caught() -> None:
    markers = parse("sample.md", SAMPLE).markers
    assert markers_without_reason(markers) == ["sample.md:16"]
    assert markers_marking_nothing(markers) == ["sample.md:27"]


def test_a_console_block_runs_only_its_prompted_commands() -> None:
    assert shell_script(sample()[34]) == 'echo "shell passes" \\\n  && test -d .\n'


def test_the_demo_address_is_pointed_at_the_test_server() -> None:
    source = "curl http://127.0.0.1:8000/x localhost:8000/y 127.0.0.1:8000/z"
    assert pointed_at(source, "127.0.0.1", 5555) == (
        "curl http://127.0.0.1:5555/x 127.0.0.1:5555/y 127.0.0.1:5555/z"
    )


def test_a_console_block_without_a_prompted_command_is_caught() -> None:
    blocks = parse("out.md", "```console\nJust output.\n```\n```console\n$ true\n```\n").blocks
    assert console_blocks_without_command(blocks) == ["out.md:1"]


def test_a_marker_may_wrap_its_reason_over_several_lines() -> None:
    text = "<!-- not run: a reason long enough\n     to wrap -->\n\n```sh\nexit 1\n```\n"
    (block,) = parse("wrap.md", text).blocks
    assert not block.runs
    assert block.marker is not None
    assert (block.marker.line, block.marker.reason) == (1, "a reason long enough to wrap")


def test_a_fence_indented_in_a_nested_list_is_still_found() -> None:
    text = "- a list\n  - nested:\n\n        ```python\n        print(1)\n        ```\n"
    (block,) = parse("list.md", text).blocks
    assert (block.line, block.lang, block.source, block.runs) == (4, "python", "print(1)\n", True)


def test_blocks_run_as_a_reader_s_shell_with_no_virtual_environment_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: the blocks ran with the tests' venv first on PATH, so the docs' bare
    `python -m app inspect` passed here and failed for a reader (`No module named 'httpx'`).
    Even a test run from an activated venv hands the blocks a PATH without it."""
    venv_bin = str(VENV / "bin")
    monkeypatch.setenv("PATH", os.pathsep.join([venv_bin, "/usr/bin", "/bin"]))
    monkeypatch.setenv("VIRTUAL_ENV", str(VENV))
    env = block_env(tmp_path / "agent.db", None)
    assert env["PATH"].split(os.pathsep) == ["/usr/bin", "/bin"]
    assert "VIRTUAL_ENV" not in env
    shown = run_block(
        Block(path="x.md", line=1, lang="sh", source="command -v python3 || true\n"),
        workdir=tmp_path / "w",
        env=env,
        venv=VENV,
    )
    assert shown.ok and venv_bin not in shown.output, shown.output
