"""A Citus cluster on this machine for the tests and the benchmark: a coordinator and two
workers, three PostgreSQL 15 instances made with `initdb` in a temporary directory, each on a
port of its own with `shared_preload_libraries = 'citus'`.

Citus is an extension built into the machine's PostgreSQL (CI installs it first); where it is
not there, `citus_missing()` says why and the tests that need a cluster skip (or fail, with
AGENT_REQUIRE_CITUS=1). Run as root (as CI is), `initdb` and `pg_ctl` run as the `postgres`
user, which owns the data directories; PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

PG_BIN = Path(os.environ.get("AGENT_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
CITUS_SO = PG_BIN.parent / "lib" / "citus.so"
HOST = "127.0.0.1"
OS_USER = "postgres"

NODE_SETTINGS = {
    "listen_addresses": f"'{HOST}'",
    "shared_preload_libraries": "'citus'",
    # Two-phase commit: a unit of work that writes a thread's shard and an actor's shard on
    # two workers commits with PREPARE TRANSACTION on each.
    "max_prepared_transactions": "200",
    "max_connections": "300",
    # Citus's own background workers (the maintenance daemon, deadlock detection) and its
    # connections between nodes come out of these.
    "max_worker_processes": "32",
    "shared_buffers": "128MB",
    "log_min_messages": "warning",
    "logging_collector": "off",
}
COORDINATOR_SETTINGS = {
    # Citus's own statistics of the statements it ran: by executor, and with the distribution
    # column's value when a statement went to one shard (`citus_stat_statements`). It needs
    # pg_stat_statements loaded beside it.
    "shared_preload_libraries": "'citus,pg_stat_statements'",
    "citus.stat_statements_track": "'all'",
}


def citus_missing() -> str | None:
    """Why a cluster cannot be started here, or None when it can."""
    if not (PG_BIN / "initdb").exists():
        return f"no PostgreSQL server binaries at {PG_BIN} (set AGENT_TEST_PG_BIN)"
    if not CITUS_SO.exists():
        return f"Citus is not installed ({CITUS_SO} is missing); .ci/run installs it first"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(OS_USER)
        except KeyError:
            return f"running as root, and there is no {OS_USER!r} user to run PostgreSQL as"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", OS_USER, "--", *args] if os.geteuid() == 0 else args


def _run(args: list[str]) -> None:
    done = subprocess.run(_as_postgres(args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr}")


@dataclass
class Node:
    name: str
    data: Path
    port: int = field(default_factory=_free_port)

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://postgres@{HOST}:{self.port}/{database}"

    def dsn(self, database: str) -> str:
        return f"postgresql://postgres@{HOST}:{self.port}/{database}"


class CitusCluster:
    """`start()` it, `create_database()` as many times as needed, `stop()` it: the data
    directories are removed then."""

    def __init__(
        self, workers: int = 2, coordinator_settings: dict[str, str] | None = None
    ) -> None:
        """`coordinator_settings`: postgresql.conf lines for the coordinator beyond its own."""
        self._coordinator_settings = {**COORDINATOR_SETTINGS, **(coordinator_settings or {})}
        self.root = Path(tempfile.mkdtemp(prefix="agent-citus-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, OS_USER, OS_USER)
        self.coordinator = Node("coordinator", self.root / "coordinator")
        self.workers = [Node(f"worker{i}", self.root / f"worker{i}") for i in range(workers)]

    @property
    def nodes(self) -> list[Node]:
        return [self.coordinator, *self.workers]

    def start(self) -> None:
        try:
            for node in self.nodes:
                self._init(node)
            for node in self.nodes:
                _run(
                    [
                        str(PG_BIN / "pg_ctl"),
                        "-D",
                        str(node.data),
                        "-l",
                        str(self.root / f"{node.name}.log"),
                        "-w",
                        "-t",
                        "60",
                        "start",
                    ]
                )
        except RuntimeError as exc:
            logs = self.log_tail()
            self.stop()
            raise RuntimeError(f"{exc}\n{logs}") from exc
        except BaseException:
            self.stop()
            raise

    def _init(self, node: Node) -> None:
        _run(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(node.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]
        )
        settings = {**NODE_SETTINGS, "port": str(node.port), "unix_socket_directories": "''"}
        if node is self.coordinator:
            settings.update(self._coordinator_settings)
        with (node.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())

    def stop(self) -> None:
        for node in self.nodes:
            if (node.data / "postmaster.pid").exists():
                subprocess.run(
                    _as_postgres(
                        [str(PG_BIN / "pg_ctl"), "-D", str(node.data), "-m", "immediate", "stop"]
                    ),
                    capture_output=True,
                    check=False,
                )
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        """The end of each node's server log: what a failing test prints."""
        out = []
        for node in self.nodes:
            log = self.root / f"{node.name}.log"
            if log.exists():
                out.append(f"--- {node.name}\n" + "\n".join(log.read_text().splitlines()[-lines:]))
        return "\n".join(out)

    async def create_database(self, prefix: str = "agent_citus") -> str:
        """A new database on every node with the extension, its workers added on the
        coordinator; its coordinator URL. Nothing is distributed yet: that is
        `python -m app distribute`'s job (`bounded_agents.store.distribute`)."""
        name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        for node in self.nodes:
            conn = await asyncpg.connect(node.dsn("postgres"), timeout=10)
            try:
                await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()
            conn = await asyncpg.connect(node.dsn(name), timeout=10)
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
            finally:
                await conn.close()
        conn = await asyncpg.connect(self.coordinator.dsn(name), timeout=10)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            await conn.execute(
                "SELECT citus_set_coordinator_host($1, $2)", HOST, self.coordinator.port
            )
            for worker in self.workers:
                await conn.execute("SELECT citus_add_node($1, $2)", HOST, worker.port)
        finally:
            await conn.close()
        return self.coordinator.url(name)
