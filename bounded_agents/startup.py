"""Start-up failures an operator caused, told in one line wherever the app is served from.

`bounded-agents serve` checks settings and the database before uvicorn starts, and prints one
line. But the README's other way, `uvicorn app.main:app`, builds the module inside uvicorn:

- a bad setting is a `ConfigError` raised while uvicorn imports `app.main`, which nothing
  catches: Python prints the whole import traceback (44 lines). `exit_in_one_line` makes
  that one uncaught error print as ``error: <message>`` (exit status 1 as before); every
  other uncaught exception keeps the previous `sys.excepthook`. A caller that catches the
  error (a test, a host's own start-up) sees nothing different.
- an unreachable database is a `StoreError` in the module's lifespan, which Starlette hands to
  uvicorn as a formatted traceback (145 lines) without the host or port.
  `startup_errors_in_one_line` restates it with the database's address (password masked),
  and has uvicorn's log say that line in the traceback's place; uvicorn then says
  "Application startup failed. Exiting." and exits with status 3.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType

from bounded_agents.errors import ConfigError, StoreError
from bounded_agents.redact import redacted_url

UVICORN_LOGGER = "uvicorn.error"
"""Where uvicorn logs the lifespan's start-up failure (Starlette's formatted traceback)."""


_told: list[BaseException] = []
"""The error `exit_in_one_line` was last given (one: the process ends on the first)."""


def exit_in_one_line(error: BaseException) -> None:
    """If `error` ends the process uncaught, print ``error: <error>`` instead of a traceback.
    The hook is installed once; a later call names the error it now stands for."""
    if not _told:
        previous = sys.excepthook

        def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            if _told and value is _told[0]:
                print(f"error: {value}", file=sys.stderr)
                return
            previous(kind, value, tb)

        sys.excepthook = hook
    _told[:] = [error]


class _OneLine(logging.Filter):
    """Replaces, once, the record of uvicorn's that carries the traceback of `error`."""

    def __init__(self, logger: logging.Logger, error: BaseException, line: str) -> None:
        super().__init__()
        self.logger, self.error, self.line = logger, error, line

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith("Traceback") and str(self.error) in text:
            record.msg, record.args, record.exc_info = self.line, (), None
            self.logger.removeFilter(self)
        return True


@asynccontextmanager
async def startup_errors_in_one_line(database_url: str) -> AsyncIterator[None]:
    """Around a lifespan's start-up: a `StoreError` (the database unreachable or refusing) or
    `ConfigError` leaves as that error's class with one line of message, naming the database
    for a `StoreError`; under uvicorn its log says that line, not the traceback."""
    try:
        yield
    except StoreError as exc:
        line = f"cannot start: the database at {redacted_url(database_url)} failed: {exc}"
        raise _logged_as_one_line(StoreError(line)) from None
    except ConfigError as exc:
        raise _logged_as_one_line(ConfigError(f"cannot start: {exc}")) from None


def _logged_as_one_line(error: ConfigError | StoreError) -> ConfigError | StoreError:
    logger = logging.getLogger(UVICORN_LOGGER)
    logger.addFilter(_OneLine(logger, error, str(error)))
    return error


__all__ = ["exit_in_one_line", "startup_errors_in_one_line"]
