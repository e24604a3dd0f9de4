"""`wrap_db_errors`: what it makes of the errors raised inside its block, and what it tells the
operator. A `UnicodeEncodeError` or `OverflowError` there is the caller's data today (SQLite's
driver binding a lone surrogate or an integer past 64 bits) and answers 422; the same class
raised by a bug of ours would answer the same 422, so the operator is told of each, by the
operation and the class, never the value (it may be user content)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from bounded_agents.errors import InvalidContent
from bounded_agents.store import SqlAgentStore
from bounded_agents.store.errors import wrap_db_errors

SECRET = "PRIVATE-WORD-\udc80"
"""The refused value: neither it, its readable part nor its surrogate may reach the log."""


def _ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The project's own records (the drivers' debug lines quote parameters: not ours)."""
    return [r for r in caplog.records if r.name.startswith("bounded_agents")]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in _ours(caplog) if r.levelno >= logging.WARNING]


def _assert_names_no_value(caplog: pytest.LogCaptureFixture) -> None:
    """No record of ours, message or traceback (whose last line would quote the error's text),
    holds the value."""
    for record in _ours(caplog):
        assert record.exc_info is None and record.exc_text is None
        text = record.getMessage()
        assert "PRIVATE-WORD" not in text
        assert "\udc80" not in text and "udc80" not in text
        assert "\udc00" not in text and "udc00" not in text


def _encode() -> None:
    SECRET.encode("utf-8")  # the error's text quotes the surrogate


def _overflow() -> None:
    raise OverflowError(f"{SECRET} too large")


@pytest.mark.parametrize("raised", [_encode, _overflow], ids=["UnicodeEncodeError", "Overflow"])
async def test_unstorable_data_is_a_422_the_operator_sees(
    raised: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="bounded_agents")
    with pytest.raises(InvalidContent) as info:
        async with wrap_db_errors("append_messages"):
            raised()
    cls = type(info.value.__cause__).__name__
    assert cls in ("UnicodeEncodeError", "OverflowError")
    [record] = _warnings(caplog)
    assert record.levelno == logging.WARNING
    assert record.name == "bounded_agents.store.errors"
    assert "append_messages" in record.getMessage() and cls in record.getMessage()
    _assert_names_no_value(caplog)


async def test_a_read_sqlites_driver_cannot_bind_is_logged_without_its_value(
    sql_store: SqlAgentStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the store, on both backends: a thread id holding a lone surrogate is a 422 on
    each. SQLite's driver raises the `UnicodeEncodeError` (logged); PostgreSQL refuses the data
    itself (SQLSTATE class 22), a path this log line is not about. Neither logs the value."""
    caplog.set_level(logging.DEBUG, logger="bounded_agents")
    with pytest.raises(InvalidContent):
        await sql_store.messages_after("PRIVATE-WORD-\udc00", 0, 5)
    logged = _warnings(caplog)
    if sql_store.engine.dialect.name == "sqlite":
        [record] = logged
        assert "messages_after" in record.getMessage()
        assert "UnicodeEncodeError" in record.getMessage()
    _assert_names_no_value(caplog)
