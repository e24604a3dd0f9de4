"""The retry loop every HTTP provider shares: `Transient` failures retried with exponential
backoff (or the server's Retry-After), both capped, then the final error raised.

One loop for the OpenAI-compatible and the Anthropic provider, so a change to how a provider
waits (the cap, the Retry-After rule) is made once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from bounded_agents.providers.openai.failures import Transient

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How a provider retries: `max_retries` after the first attempt, waits from
    `backoff_base` doubling, a Retry-After taken instead, both capped at `max_retry_wait`."""

    max_retries: int
    backoff_base: float
    max_retry_wait: float
    sleep: Callable[[float], Awaitable[None]] | None = None
    """A test's clock; None: asyncio's."""

    def wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_retry_wait)
        backoff: float = self.backoff_base * 2.0 ** (state.attempt_number - 1)
        return min(backoff, self.max_retry_wait)


async def retried(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    before_sleep: Callable[[RetryCallState], None],
) -> T:
    """Run `attempt`, retrying `Transient` failures as `policy` says; then raise the final
    error (`Transient.final`)."""
    kwargs: dict[str, Any] = {} if policy.sleep is None else {"sleep": policy.sleep}
    retrying = AsyncRetrying(
        stop=stop_after_attempt(policy.max_retries + 1),
        wait=policy.wait,
        retry=retry_if_exception_type(Transient),
        reraise=True,
        before_sleep=before_sleep,
        **kwargs,
    )
    try:
        result: T = await retrying(attempt)
    except Transient as exc:
        raise exc.final from exc.__cause__
    return result


__all__ = ["RetryPolicy", "retried"]
