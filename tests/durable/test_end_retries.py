"""A run's end is tried again while the database fails, but not after a timeout: a timed-out
write has already waited a whole statement timeout, and in a partition every try waits
another (the partition test measured 3.7 s of a failing turn's 9.7 s in these tries, with a
1 s timeout; 30 s is the default). Counted here, without a database."""

from __future__ import annotations

import pytest

from bounded_agents.durable.journal_rows import END_ATTEMPTS, with_retries
from bounded_agents.errors import StoreError


def _failing(cause: BaseException) -> tuple[list[int], object]:
    calls: list[int] = []

    async def write() -> None:
        calls.append(1)
        try:
            raise cause
        except BaseException as exc:
            raise StoreError("end_run: the database failed") from exc

    return calls, write


@pytest.mark.parametrize(
    "cause", [TimeoutError(), StoreError("wrapped"), ConnectionRefusedError()], ids=repr
)
async def test_a_runs_end_is_tried_once_after_a_timeout_and_every_time_after_other_faults(
    cause: BaseException,
) -> None:
    if isinstance(cause, StoreError):  # a timeout two causes down is still a timeout
        cause.__cause__ = TimeoutError()
    calls, write = _failing(cause)

    with pytest.raises(StoreError):
        await with_retries(write)  # type: ignore[arg-type]

    timed_out = isinstance(cause, TimeoutError) or isinstance(cause.__cause__, TimeoutError)
    assert len(calls) == (1 if timed_out else END_ATTEMPTS)


async def test_a_runs_end_that_succeeds_on_a_later_try_is_recorded_once() -> None:
    calls: list[int] = []

    async def write() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise StoreError("end_run: database error (ConnectionResetError)")

    await with_retries(write)
    assert len(calls) == 3


async def test_the_row_of_a_run_whose_first_unit_never_committed_is_tried_after_timeouts() -> None:
    """Nothing keeps that row for later (a review found it would be given up after one
    timeout, and the failed run never written): it is still tried `END_ATTEMPTS` times."""
    calls, write = _failing(TimeoutError())
    with pytest.raises(StoreError):
        await with_retries(write, after_timeouts=True)  # type: ignore[arg-type]
    assert len(calls) == END_ATTEMPTS
