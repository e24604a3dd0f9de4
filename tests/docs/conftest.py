"""One demo server and one migrated database file per session, shared by every block test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.execute import Target
from tests.docs.server import copy_database, demo_server, migrated_template


@pytest.fixture(scope="session")
def template_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("docs-template"))


@pytest.fixture(scope="session")
def demo_target(
    tmp_path_factory: pytest.TempPathFactory, template_database: Path
) -> Iterator[Target]:
    directory = tmp_path_factory.mktemp("docs-server")
    database = copy_database(template_database, directory)
    with demo_server(database, directory / "server.log") as target:
        yield target
