"""Driver errors become the project's own at the store boundary, chained with `from`."""

from __future__ import annotations

import logging
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import exc as sa_exc

from bounded_agents.errors import AgentError, InvalidContent, StoreError
from bounded_agents.store.onehop import PendingFailed

log = logging.getLogger(__name__)


@asynccontextmanager
async def wrap_db_errors(operation: str) -> AsyncIterator[None]:
    """Translate SQLAlchemy/driver failures raised inside the block into `StoreError`.

    Our own errors pass through untouched. The message names the operation and the driver's
    error class, never the SQL or its parameters (which may hold user content).
    """
    try:
        yield
    except AgentError:
        raise
    except sa_exc.IntegrityError as exc:
        _close_cursor(exc)
        raise  # integrity errors mean something to the caller: it translates them itself
    except sa_exc.DataError as exc:
        _close_cursor(exc)
        refused = f"{operation}: the database refused the data ({cause_of(exc)})"
        raise InvalidContent(refused) from exc
    except sa_exc.TimeoutError as exc:
        raise StoreError(f"{operation}: no database connection free (pool timeout)") from exc
    except (sa_exc.DBAPIError, sa_exc.InterfaceError) as exc:
        _close_cursor(exc)
        if _refused_data(exc):
            refused = f"{operation}: the database refused the data ({cause_of(exc)})"
            raise InvalidContent(refused) from exc
        raise StoreError(f"{operation}: database error ({cause_of(exc)})") from exc
    except (UnicodeEncodeError, OverflowError) as exc:
        # SQLite's driver, binding a lone surrogate or an integer past 64 bits: the caller's
        # data, not an outage, as PostgreSQL's refusal of the same is (`_refused_data`). Logged,
        # as no other 422 here is: these classes are Python's, not the driver's, so a bug of
        # ours raising one would be the same 422 and otherwise never seen. The operation and
        # the class only: the error's text quotes the value, which may be user content.
        log.warning(
            "%s: unstorable data refused as the caller's (%s)", operation, type(exc).__name__
        )
        raise InvalidContent(
            f"{operation}: the data cannot be stored ({type(exc).__name__})"
        ) from exc
    except TimeoutError as exc:  # asyncpg's statement or connect timeout (a statement_timeout)
        raise StoreError(f"{operation}: the database did not answer in time") from exc
    except OSError as exc:
        raise StoreError(f"{operation}: database unreachable ({exc.__class__.__name__})") from exc


def _refused_data(exc: sa_exc.StatementError) -> bool:
    """Whether PostgreSQL refused the statement's data (SQLSTATE class 22, data exception: a
    NUL, a lone surrogate, a value too long or out of range), which SQLAlchemy's asyncpg
    adapter raises as a plain `DBAPIError`: the caller's mistake (422), not an outage (503)."""
    return str(getattr(exc.orig, "sqlstate", None) or "").startswith("22")


def _close_cursor(exc: BaseException) -> None:
    """Let go of the failed statement's driver cursor now. The traceback still references it,
    in a cycle only the garbage collector would break, at a moment of its choosing and on the
    event-loop thread, where finalizing it waits for its connection (a stall on SQLite).
    Clearing the finished frames closes it here; frames still running are left alone."""
    traceback.clear_frames(exc.__traceback__)


def cause_of(exc: sa_exc.StatementError) -> str:
    """The driver error's class (or the deferred write's), never its text: it may quote data."""
    orig = exc.orig
    if isinstance(orig, PendingFailed):  # a deferred write, sent with this statement or COMMIT
        return f"{type(orig.cause).__name__} in the deferred {orig.operation}"
    return type(orig).__name__ if orig is not None else type(exc).__name__
