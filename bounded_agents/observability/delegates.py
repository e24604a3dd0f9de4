"""The optional runtime powers an `ObservedRuntime` passes on to the runtime it wraps: one
mixin per power, each delegating that power's methods to `self.inner`, combined per wrapped
runtime (`bounded_agents.observability.runtime.observer_class`) so the observed runtime has
exactly the powers the runtime has (the `supports_*` probes answer alike, with no
`__getattr__` forwarding). Mixins, not subclasses of `ObservedRuntime`: this module imports
nothing of `runtime.py`, which imports it, so the two form no import circle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TypeVar

from bounded_agents.core.ports import (
    DurableRuntime,
    PrunedStatus,
    RunResumer,
    RunTrace,
    supports_erased_run_sweep,
    supports_keyed_runs,
    supports_launch,
    supports_owner_check,
    supports_pruning,
    supports_run_erasure,
    supports_run_executor,
    supports_run_forgetting,
    supports_run_timeline,
    supports_thread_holding,
)

_T = TypeVar("_T")


class PowerDelegate:
    """A mixin that passes one power on to `inner`, the runtime an observed runtime wraps."""

    inner: DurableRuntime


class KeyedRunsDelegate(PowerDelegate):
    async def find_keyed_run(
        self, thread_id: str, actor_id: str, key: str
    ) -> tuple[str, str] | None:
        inner = self.inner
        assert supports_keyed_runs(inner)
        return await inner.find_keyed_run(thread_id, actor_id, key)


class ExecutorDelegate(PowerDelegate):
    def register_resumer(self, resume: RunResumer) -> None:
        inner = self.inner
        assert supports_run_executor(inner)
        inner.register_resumer(resume)

    async def execute(self, run_id: str, attempt: Callable[[], Awaitable[_T]]) -> _T:
        inner = self.inner
        assert supports_run_executor(inner)
        return await inner.execute(run_id, attempt)


class TimelineDelegate(PowerDelegate):
    async def thread_runs(
        self, thread_id: str, *, limit: int, before_seq: int | None = None
    ) -> list[RunTrace]:
        inner = self.inner
        assert supports_run_timeline(inner)
        return await inner.thread_runs(thread_id, limit=limit, before_seq=before_seq)


class PrunerDelegate(PowerDelegate):
    async def prune_steps(
        self, older_than_seconds: float, limit: int, *, status: PrunedStatus = "completed"
    ) -> int:
        inner = self.inner
        assert supports_pruning(inner)
        return await inner.prune_steps(older_than_seconds, limit, status=status)


class LauncherDelegate(PowerDelegate):
    async def launch(
        self,
        system_database_url: str,
        *,
        executor_id: str | None = None,
        application_version: str | None = None,
    ) -> None:
        inner = self.inner
        assert supports_launch(inner)
        await inner.launch(
            system_database_url, executor_id=executor_id, application_version=application_version
        )

    async def shutdown(self) -> None:
        inner = self.inner
        assert supports_launch(inner)
        await inner.shutdown()


class EraserDelegate(PowerDelegate):
    async def thread_run_ids(self, thread_id: str) -> list[str]:
        inner = self.inner
        assert supports_run_erasure(inner)
        return await inner.thread_run_ids(thread_id)

    async def erase_runs(self, run_ids: Sequence[str]) -> None:
        inner = self.inner
        assert supports_run_erasure(inner)
        await inner.erase_runs(run_ids)


class SweeperDelegate(PowerDelegate):
    async def sweep_erased(self, *, since: datetime | None = None) -> int:
        inner = self.inner
        assert supports_erased_run_sweep(inner)
        return await inner.sweep_erased(since=since)


class ForgetterDelegate(PowerDelegate):
    async def forget_runs(self, run_ids: Sequence[str]) -> None:
        inner = self.inner
        assert supports_run_forgetting(inner)
        await inner.forget_runs(run_ids)


class HolderDelegate(PowerDelegate):
    def hold(self, thread_id: str) -> AbstractAsyncContextManager[None]:
        inner = self.inner
        assert supports_thread_holding(inner)
        return inner.hold(thread_id)


class OwnerCheckDelegate(PowerDelegate):
    """The wrapped runtime's `begin` checks the thread's owner; so, through it, does this one."""

    checks_thread_owner = True

    def owner_checked(self, run_id: str) -> None:
        inner = self.inner
        assert supports_owner_check(inner)
        inner.owner_checked(run_id)


DELEGATES: tuple[tuple[Callable[[object], bool], type[PowerDelegate]], ...] = (
    (supports_keyed_runs, KeyedRunsDelegate),
    (supports_run_executor, ExecutorDelegate),
    (supports_run_timeline, TimelineDelegate),
    (supports_pruning, PrunerDelegate),
    (supports_launch, LauncherDelegate),
    (supports_run_erasure, EraserDelegate),
    (supports_erased_run_sweep, SweeperDelegate),
    (supports_run_forgetting, ForgetterDelegate),
    (supports_thread_holding, HolderDelegate),
    (supports_owner_check, OwnerCheckDelegate),
)
"""The runtime powers an observed runtime passes on, each with the mixin that implements it by
delegation: the observed runtime of a runtime has exactly the powers the runtime has."""

__all__ = [
    "DELEGATES",
    "EraserDelegate",
    "ExecutorDelegate",
    "ForgetterDelegate",
    "HolderDelegate",
    "KeyedRunsDelegate",
    "LauncherDelegate",
    "OwnerCheckDelegate",
    "PowerDelegate",
    "PrunerDelegate",
    "SweeperDelegate",
    "TimelineDelegate",
]
