"""The project's error tree, in one place so every boundary raises the same types.

    AgentError                      code           HTTP (see bounded_agents/http/errors.py)
    ├── ConfigError                 config_error        500
    ├── InvalidInput                invalid_input       422
    │   ├── InvalidContent          invalid_content     422  (content a store cannot hold)
    │   ├── IdempotencyKeyReused    idempotency_key_reused 422  (same key, another request)
    │   └── InvalidParameter        invalid_parameter   400  (bounded_agents/http/openai/errors.py:
    /v1 only) │       └── UnsupportedParameter unsupported_parameter 400
    ├── ContentTooLarge             content_too_large   413
    ├── NotFound                    not_found           404
    │   ├── AgentNotFound           agent_not_found     404
    │   ├── ThreadNotFound          thread_not_found    404
    │   │   └── ThreadErased        thread_not_found    404  (a named thread's id, erased whole)
    │   ├── MessageNotFound         message_not_found   404  (no message at that seq to erase)
    │   └── RunNotFound             run_not_found       404
    │       └── PreviousResponseNotFound run_not_found  404  (bounded_agents/http/openai/errors.py)
    ├── ThreadBusy                  thread_busy         409
    │   └── AnswerErased            answer_erased       410  (the Idempotency-Key's run completed;
    │                                                         its answer was erased since)
    ├── TurnInProgress              turn_in_progress    409  (the Idempotency-Key's turn still runs)
    ├── LeaseLost                   lease_lost          409  (another process took the run over)
    ├── RunCompleted                run_completed       409  (resume of a completed run)
    ├── DuplicateMessage            duplicate_message   409  (a run's message stored twice)
    ├── QuotaExceeded               quota_exceeded      429
    ├── StoreError                  store_error         503
    ├── JournalMismatch             journal_mismatch    500
    ├── ProviderError               provider_error      502
    │   ├── ProviderTimeout         provider_timeout    502
    │   ├── ProviderRateLimited     provider_rate_limited 502
    │   ├── ProviderBadResponse     provider_bad_response 502
    │   └── ProviderContextExceeded provider_context_exceeded 502
    ├── RunFailed                   run_failed          the cause's code and status
    ├── RecordedFailure             the recorded code   its status (a stored run's failure)
    └── Unauthorized                unauthorized        401  (bounded_agents/http/errors.py: HTTP
    only)

A run an erasure failed (its process had stopped, and the erasure deleted its journal) is
recorded with the code `journal_erased` (410): its client, and a keyed retry, are answered it.

The HTTP edge adds codes of its own that no domain error carries: `validation_error` (422),
`invalid_json` (400, a body that cannot be read as JSON: malformed, not UTF-8, nested too
deeply, a number too long), `bad_request` (400, any other request the HTTP layer refuses),
`not_found` (404, unknown route), `method_not_allowed` (405) and `internal_error` (500,
anything unexpected; its message is never shown).

Whatever a model provider raises becomes a `ProviderError` (502) with a fixed message; only
the provider adapters' own `ProviderError`s carry a message of their own. The OpenAI-compatible
`/v1` API answers in OpenAI's error shape with the same codes, a request that does not validate
as a 400 (`validation_error`, or `unknown_parameter` for a parameter it does not know).

Each error carries a stable ``code`` (what clients branch on) and keeps its data as attributes,
so nothing has to parse a message. This module is stdlib-only: ``app.core`` may import it.
"""

from __future__ import annotations

from typing import ClassVar

ECHO_CHARS = 100
"""At most this much of a caller's own value is quoted back in an error: enough to recognise a
name or an id, never a 200 KB `model` echoed whole."""


def clipped(value: str, limit: int = ECHO_CHARS) -> str:
    """`value` as an error may show it: whole when short, else its start and its length. A
    lone surrogate is shown escaped (`\\ud800`): a caller's JSON may hold one, and an error
    body quoting it raw could not be encoded as UTF-8 (a 500 instead of the error)."""
    shown = value if len(value) <= limit else f"{value[:limit]}… ({len(value):,} characters)"
    if shown.isascii():
        return shown
    return shown.encode("utf-8", "backslashreplace").decode("utf-8")


def echoed(value: str, limit: int = ECHO_CHARS) -> str:
    """`value` quoted (its repr) as an error may show it; see `clipped`."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value):,} characters)"


class AgentError(Exception):
    """Root of every error this project raises on purpose."""

    code: ClassVar[str] = "agent_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(AgentError):
    """The module was wired or configured wrongly (a programming error, not a user's)."""

    code = "config_error"


class InvalidInput(AgentError):
    """A caller sent something the project refuses before doing any work."""

    code = "invalid_input"


class InvalidContent(InvalidInput):
    """Content a store cannot hold as sent (a NUL character, for PostgreSQL text)."""

    code = "invalid_content"


class ContentTooLarge(AgentError):
    code = "content_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"content is {size} bytes, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class NotFound(AgentError):
    code = "not_found"


class AgentNotFound(NotFound):
    code = "agent_not_found"

    def __init__(self, agent: str) -> None:
        super().__init__(f"no agent named {echoed(agent)}")
        self.agent = agent


class ThreadNotFound(NotFound):
    """Raised for a missing thread AND for another actor's thread: the two must look alike."""

    code = "thread_not_found"

    def __init__(self, thread_id: str) -> None:
        super().__init__(f"thread {echoed(thread_id)} not found")
        self.thread_id = thread_id


class ThreadErased(ThreadNotFound):
    """A thread a caller names (`create_named_thread(..., unless_erased=True)`) whose id was
    erased whole: not made again. The `/v1` keyed path answers it as `AnswerErased`."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(thread_id)
        self.message = f"thread {echoed(thread_id)} was erased"
        self.args = (self.message,)


class MessageNotFound(NotFound):
    """No message with that seq in the thread (never stored, or erased already): 404."""

    code = "message_not_found"

    def __init__(self, thread_id: str, seq: int) -> None:
        super().__init__(f"thread {echoed(thread_id)} has no message {seq}")
        self.thread_id = thread_id
        self.seq = seq


class RunNotFound(NotFound):
    code = "run_not_found"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {echoed(run_id)} not found")
        self.run_id = run_id


class JournalPruned(NotFound):
    """The run completed long enough ago that its journal was deleted (retention): there is
    nothing left to replay, and running it again would call the model twice."""

    code = "journal_pruned"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} completed and its journal was pruned: nothing to replay")
        self.run_id = run_id


class AnswerErased(NotFound):
    """A repeat of a completed keyed run whose answer was erased since: the turn happened (so it
    is not run again, which would call the model twice), and what it answered is gone, so no
    wait or retry can get it. Stated at once, never as "still running"."""

    code = "answer_erased"

    def __init__(self, run_id: str | None) -> None:
        """`run_id` None: the key's conversation was erased whole (its run with it)."""
        if run_id is None:
            message = (
                "the turn with this Idempotency-Key ran in a conversation deleted since; "
                "send a new key for a new turn"
            )
        else:
            message = (
                f"the turn with this Idempotency-Key (run {run_id}) completed and its answer "
                "was erased since; send a new key for a new turn"
            )
        super().__init__(message)
        self.run_id = run_id


class ThreadBusy(AgentError):
    """A run holds the thread's lease; turns on one thread are serialized, never interleaved."""

    code = "thread_busy"

    def __init__(self, thread_id: str) -> None:
        super().__init__(f"thread {thread_id!r} already has a turn running; retry when it ends")
        self.thread_id = thread_id


class IdempotencyKeyReused(InvalidInput):
    """The Idempotency-Key named an earlier turn of another request: answering that turn's
    answer to this request would be wrong, and running this one would break the key's promise."""

    code = "idempotency_key_reused"

    def __init__(self, run_id: str | None) -> None:
        first = f" (run {run_id})" if run_id is not None else ""
        super().__init__(
            f"this Idempotency-Key was first sent with another request{first}; "
            "send a new key for a new turn"
        )
        self.run_id = run_id


class TurnInProgress(AgentError):
    """A turn with this Idempotency-Key exists on the thread. A runtime's `begin` raises it when
    the database's unique index refuses the run's row (so two concurrent requests with one key
    cannot both start one), with the first run's id and request fingerprint; the module then
    answers with that run's outcome. A client sees it only while that run still runs."""

    code = "turn_in_progress"

    def __init__(self, run_id: str, fingerprint: str | None = None) -> None:
        super().__init__(
            f"the turn with this Idempotency-Key (run {run_id}) is still running; retry the "
            "same request to get its answer"
        )
        self.run_id = run_id
        self.fingerprint = fingerprint


class LeaseLost(AgentError):
    """This process stalled past its run's lease and another one took the run over."""

    code = "lease_lost"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} was taken over by another process (its lease ran out)")
        self.run_id = run_id


class RunCompleted(AgentError):
    """`resume` of a run that completed: its answer is stored, there is nothing to finish."""

    code = "run_completed"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} is already completed: nothing to resume")
        self.run_id = run_id


class DuplicateMessage(AgentError):
    """The run already stored a message of this role: what makes a replayed persist idempotent."""

    code = "duplicate_message"

    def __init__(self, run_id: str, role: str) -> None:
        super().__init__(f"run {run_id!r} already stored its {role} message")
        self.run_id = run_id
        self.role = role


class QuotaExceeded(AgentError):
    code = "quota_exceeded"

    def __init__(self, actor_id: str, used: int, limit: int) -> None:
        # `used` counts tokens held for calls in flight too: they are as good as spent.
        super().__init__(f"token quota spent: {used} of {limit} tokens used or in use")
        self.actor_id = actor_id
        self.used = used
        self.limit = limit


class StoreError(AgentError):
    """The database failed (unreachable, timed out, or refused a statement)."""

    code = "store_error"


class JournalMismatch(AgentError):
    """A replay asked for a step other than the one journaled at that position."""

    code = "journal_mismatch"


class ProviderError(AgentError):
    """The model provider failed after retries; the run fails and no partial answer is kept."""

    code = "provider_error"


class ProviderTimeout(ProviderError):
    code = "provider_timeout"


class ProviderRateLimited(ProviderError):
    code = "provider_rate_limited"


class ProviderBadResponse(ProviderError):
    code = "provider_bad_response"

    def __init__(self, message: str, *, paid: object | None = None) -> None:
        super().__init__(message)
        self.paid = paid
        """The usage (`core.ports.Usage`) the provider reported, or the estimate of it, when
        the answer it billed was unusable (a tool call whose input is no object): the loop
        books it, since the call was paid for (found by attack: it was booked as nothing)."""


class ProviderContextExceeded(ProviderError):
    """The provider refused the request as longer than its model's context. Final (resending
    it cannot succeed), so a fold splits its chunk and retries smaller instead."""

    code = "provider_context_exceeded"


class RunFailed(AgentError):
    """A turn failed. Its user message is kept; `module.loop.resume(run_id)` can finish it."""

    code = "run_failed"

    def __init__(self, run_id: str, cause: BaseException) -> None:
        super().__init__(f"run {run_id} failed: {cause}")
        self.run_id = run_id
        self.cause = cause

    @property
    def cause_code(self) -> str:
        if isinstance(self.cause, RecordedFailure):
            return self.cause.recorded_code
        return self.cause.code if isinstance(self.cause, AgentError) else "internal_error"


class RecordedFailure(AgentError):
    """A run's failure as its record keeps it (code and message; the exception is long gone):
    what a repeated request is answered when the turn it repeats failed. It answers with the
    recorded code and that code's status, as the first request was answered."""

    code = "run_failed"

    def __init__(self, recorded_code: str, message: str) -> None:
        super().__init__(message)
        self.recorded_code = recorded_code
