"""`AnthropicProvider`: Claude over the native Messages API, through the `anthropic` SDK.

Why native and not Anthropic's OpenAI-compatible endpoint: that endpoint does no prompt
caching, so a Claude thread there paid full price for the prefix the hysteresis window keeps
stable. Here the breakpoints of `wire` mark that prefix, and the usage the API reports
(`cache_read_input_tokens`, `cache_creation_input_tokens`) is booked apart (`response`).

The SDK's own retries are off (`max_retries=0`): failures are classified and retried the way
`OpenAICompatibleProvider` does it (`openai_failures.status_failure`: 429 with its
`retry-after`, 529 overloaded and other 5xx retried with capped exponential backoff, "prompt is
too long" a `ProviderContextExceeded` the fold splits its chunk on, every other 4xx final), so
one turn's retry budget means the same on both providers. A stream is retried only until it has
begun; a stream cut before its `message_stop` is a `ProviderBadResponse`, never a whole answer.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import Any, TypeVar

import anthropic
import httpx
from tenacity import RetryCallState

from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta
from bounded_agents.core.turn.constants import MAX_ANSWER_CHARS
from bounded_agents.errors import ProviderBadResponse, ProviderError, ProviderTimeout
from bounded_agents.providers.anthropic.response import (
    STOP_REASONS,
    StreamAssembly,
    message_response,
    usage,
)
from bounded_agents.providers.anthropic.wire import CachePlan, messages_body
from bounded_agents.providers.openai.failures import Transient, status_failure
from bounded_agents.providers.retries import RetryPolicy, retried

logger = logging.getLogger(__name__)

_HTTP_LIBRARIES: list[ModuleType] = [httpx]
with contextlib.suppress(ImportError):  # the SDK's transport from anthropic 2.x on
    import httpx2

    _HTTP_LIBRARIES.append(httpx2)

STREAM_STALLS: tuple[type[BaseException], ...] = (
    anthropic.APITimeoutError,
    *(library.TimeoutException for library in _HTTP_LIBRARIES),
)
"""What a stalled stream raises: the SDK's timeout, or its transport's (`httpx` or `httpx2`,
whichever the installed SDK uses) when the stall comes between two events."""
STREAM_CUTS: tuple[type[BaseException], ...] = (
    anthropic.APIError,
    *(library.HTTPError for library in _HTTP_LIBRARIES),
)
"""What a stream cut off mid-answer raises, on either transport."""
_RESPONSES = tuple(library.Response for library in _HTTP_LIBRARIES)
_UNREADABLE: tuple[type[BaseException], ...] = (*STREAM_CUTS, ValueError)
"""What a whole message sent in place of a stream raises when it is cut or no JSON."""
_MALFORMED = (KeyError, IndexError, TypeError, ValueError)
"""What reading a stream's events raises when the server sent no valid one."""
MAX_WHOLE_MESSAGE_BYTES = 4 * MAX_ANSWER_CHARS
"""The largest JSON message read when a server ignored `stream: true`: an answer at the
streamed bound (`MAX_ANSWER_CHARS`), escaped, with room for its tool inputs."""

T = TypeVar("T")

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
"""The API root the SDK appends `/v1/messages` to."""


class AnthropicProvider:
    """Claude's Messages API with `complete` and `stream`, prompt-cache breakpoints included.

    Args:
        api_key: Sent by the SDK (as `x-api-key`, or a bearer token in its 2.x releases).
        model: e.g. ``claude-sonnet-4-5``.
        base_url: The API root (``https://api.anthropic.com``); a test's server or a gateway.
        timeout: Seconds per request.
        max_retries: Retries after the first attempt.
        max_tokens: The answer cap (the Messages API requires one; `wire.DEFAULT_MAX_TOKENS`
            when unset); a request's own cap replaces it.
        cache: Whether to place `cache_control` breakpoints.
    """

    def __init__(
        self,
        api_key: str,
        model: str,
        base_url: str = ANTHROPIC_BASE_URL,
        timeout: float = 60.0,
        max_retries: int = 3,
        *,
        backoff_base: float = 0.5,
        max_retry_wait: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        max_tokens: int | None = None,
        cache: bool = True,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.max_retry_wait = max_retry_wait
        self.max_tokens = max_tokens
        self.cache = cache
        self._api_key = api_key
        self._sleep = sleep
        # The SDK's own HTTP client: its releases moved from `httpx` to `httpx2` and it refuses
        # the other's client, so none is handed in (the tests talk to a real local server).
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=self.base_url, timeout=timeout, max_retries=0
        )
        self.uncacheable_calls = 0
        """Calls whose cached prefix was below the model's minimum (so nothing was cached);
        each is also logged."""
        self.last_plan: CachePlan | None = None

    def __repr__(self) -> str:
        return f"AnthropicProvider(url={self.base_url!r}, model={self.model!r})"

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> AnthropicProvider:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- ModelProvider ------------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self._body(request, stream=False)

        async def attempt() -> Any:
            try:
                return await self._client.messages.create(**body)
            except anthropic.APIError as exc:
                raise self._failure(exc) from exc
            except ValueError as exc:  # a 200 whose body is no JSON (a proxy's HTML page)
                raise ProviderBadResponse(f"provider response is not JSON ({exc})") from exc

        message = await self._retrying(attempt)
        try:
            data = message.model_dump(mode="json")
        except (TypeError, AttributeError, ValueError) as exc:
            raise ProviderBadResponse(f"provider response is not a message ({exc!r})") from exc
        return self._whole(request, data)

    def _whole(self, request: ModelRequest, data: Any) -> ModelResponse:
        """A whole Messages answer (a JSON `message`) as the step's response."""
        try:
            return message_response(
                request,
                data.get("content") or [],
                data.get("stop_reason"),
                data.get("usage"),
                str(data.get("model") or self.model),
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            if isinstance(exc, ProviderError):
                raise
            raise ProviderBadResponse(f"provider response is not a message ({exc!r})") from exc

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        """Yield a TextDelta per text delta, then the assembled ModelResponse."""
        async with contextlib.aclosing(self._stream(request)) as events:
            async for event in events:
                yield event

    async def _stream(
        self, request: ModelRequest
    ) -> AsyncGenerator[TextDelta | ModelResponse, None]:
        body = self._body(request, stream=True)

        async def attempt() -> Any:
            try:
                return await self._client.messages.create(**body)
            except anthropic.APIError as exc:
                raise self._failure(exc) from exc

        events = await self._retrying(attempt)
        read_whole = await self._unstreamed(request, events)
        if read_whole is not None:
            for event in read_whole:
                yield event
            return
        assembly = StreamAssembly(request, self.model)
        try:
            async for event in events:
                delta = assembly.feed(event.model_dump(mode="json"))
                if delta:
                    yield TextDelta(text=delta)
                if assembly.done:
                    break
        except ProviderError:
            raise
        except anthropic.APIStatusError as exc:
            raise ProviderError(f"provider failed mid-stream: {_message(exc)}") from exc
        except STREAM_STALLS as exc:
            raise ProviderTimeout(
                f"stream from {self.base_url} stalled for more than {self.timeout}s"
            ) from exc
        except STREAM_CUTS as exc:
            raise ProviderBadResponse(f"stream from {self.base_url} was cut off: {exc}") from exc
        except _MALFORMED as exc:
            # An event that is no JSON, a delta for a block never started, a null text: the
            # server's fault, named as such (found by attack: raw KeyError / TypeError).
            raise self._malformed(exc) from exc
        finally:
            with contextlib.suppress(Exception):
                await events.close()
        try:
            done = assembly.result()
        except ProviderError:
            raise
        except _MALFORMED as exc:
            raise self._malformed(exc) from exc
        yield done

    async def _unstreamed(
        self, request: ModelRequest, events: Any
    ) -> list[TextDelta | ModelResponse] | None:
        """What the stream's events would be, when its response is labelled JSON: a server
        that ignored `stream: true` answers the whole message so (a gateway or proxy that
        drops the flag; found by attack: the SSE reader found no event in it, so the billed
        answer was lost as a cut stream and the step asked again), and one that streams under
        the wrong label is still read as a stream. None for a response labelled otherwise,
        which the SDK reads as it comes. The body is read up to `MAX_WHOLE_MESSAGE_BYTES`
        (its `Content-Length` first, then as it arrives): an endless body is cut there."""
        response = getattr(events, "response", None)
        if not isinstance(response, _RESPONSES):
            return None
        kind = response.headers.get("content-type", "")
        if not kind.split(";")[0].strip().lower().endswith("json"):
            return None
        try:
            body = await self._bounded_body(response)
        except ProviderError:
            raise
        except STREAM_STALLS as exc:
            raise ProviderTimeout(
                f"answer from {self.base_url} stalled for more than {self.timeout}s"
            ) from exc
        except _UNREADABLE as exc:
            raise ProviderBadResponse(
                f"unstreamed answer from {self.base_url} was cut off ({exc!r})"
            ) from exc
        finally:
            with contextlib.suppress(Exception):
                await events.close()
        if body.lstrip()[:1] != b"{":
            return self._sse_body(request, body)
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise ProviderBadResponse(
                f"unstreamed answer from {self.base_url} is not a message ({exc!r})"
            ) from exc
        if not isinstance(data, dict) or data.get("type") != "message":
            raise ProviderBadResponse(f"unstreamed answer from {self.base_url} is not a message")
        whole = self._whole(request, data)
        return [TextDelta(text=whole.content), whole] if whole.content else [whole]

    async def _bounded_body(self, response: Any) -> bytes:
        """The response's body, refused (`ProviderBadResponse`) past `MAX_WHOLE_MESSAGE_BYTES`
        without reading further."""
        limit = MAX_WHOLE_MESSAGE_BYTES
        too_large = f"unstreamed answer from {self.base_url} is over {limit} bytes"
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise ProviderBadResponse(too_large)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise ProviderBadResponse(too_large)
            chunks.append(chunk)
        return b"".join(chunks)

    def _sse_body(self, request: ModelRequest, body: bytes) -> list[TextDelta | ModelResponse]:
        """A whole event stream read from a body (a stream labelled JSON): its events fed to
        the assembly as the SDK's reader would have fed them."""
        assembly = StreamAssembly(request, self.model)
        out: list[TextDelta | ModelResponse] = []
        try:
            text = body.decode("utf-8").replace("\r\n", "\n")
            for block in text.split("\n\n"):
                data = [
                    line[5:].removeprefix(" ")
                    for line in block.split("\n")
                    if line.startswith("data:")
                ]
                if not data:
                    continue
                delta = assembly.feed(json.loads("\n".join(data)))
                if delta:
                    out.append(TextDelta(text=delta))
                if assembly.done:
                    break
            out.append(assembly.result())
        except ProviderError:
            raise
        except _MALFORMED as exc:
            raise self._malformed(exc) from exc
        return out

    def _malformed(self, exc: Exception) -> ProviderBadResponse:
        return ProviderBadResponse(
            f"stream from {self.base_url} is malformed ({type(exc).__name__}: {exc})"
        )

    async def count_tokens(self, request: ModelRequest) -> int:
        """`TokenCountingProvider`: the request's input tokens by Claude's own tokenizer, from
        the free `POST /v1/messages/count_tokens` (the same system, messages and tools the
        call would send; no cache breakpoints, which do not change the count)."""
        body, _ = messages_body(
            request, model=self.model, stream=False, max_tokens=self.max_tokens, cache=False
        )
        del body["max_tokens"]

        async def attempt() -> Any:
            try:
                return await self._client.messages.count_tokens(**body)
            except anthropic.APIError as exc:
                raise self._failure(exc) from exc

        counted = await self._retrying(attempt)
        try:
            return int(counted.input_tokens)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ProviderBadResponse(f"provider token count is not a count ({exc!r})") from exc

    # --- request ------------------------------------------------------------------------------

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        body, plan = messages_body(
            request, model=self.model, stream=stream, max_tokens=self.max_tokens, cache=self.cache
        )
        self.last_plan = plan
        if plan.breakpoints and not plan.cacheable:
            self.uncacheable_calls += 1
            logger.info(
                "prompt prefix of ~%d tokens is below %s's minimum cacheable %d: not cached",
                plan.prefix_tokens,
                self.model,
                plan.min_tokens,
            )
        return body

    # --- failures and retries -----------------------------------------------------------------

    def _failure(self, exc: anthropic.APIError) -> Exception:
        if isinstance(exc, anthropic.APITimeoutError):
            return Transient(
                ProviderTimeout(f"no answer from {self.base_url} within {self.timeout}s")
            )
        if isinstance(exc, anthropic.APIStatusError):
            content = json.dumps(exc.body).encode() if exc.body is not None else b""
            failure = status_failure(exc.status_code, exc.response.headers, content)
            return self._scrubbed(failure)
        return Transient(ProviderError(f"could not talk to {self.base_url}: {exc!r}"))

    def _scrubbed(self, failure: Exception) -> Exception:
        """The API key blanked out of the error's message (a proxy may echo it back)."""
        error = failure.final if isinstance(failure, Transient) else failure
        if isinstance(error, ProviderError) and self._api_key and self._api_key in error.message:
            error.message = error.message.replace(self._api_key, "[redacted]")
            error.args = (error.message,)
        return failure

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt`, retrying `Transient` failures (`bounded_agents.providers.retries`)."""
        policy = RetryPolicy(self.max_retries, self.backoff_base, self.max_retry_wait, self._sleep)
        return await retried(attempt, policy, self._log_retry)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        logger.warning(
            "model call to %s failed (attempt %d of %d): %s; retrying in %.2fs",
            self.base_url,
            state.attempt_number,
            self.max_retries + 1,
            exc.final if isinstance(exc, Transient) else exc,
            wait,
        )


def _message(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message") or exc.message)
    return str(exc.message)


__all__ = ["ANTHROPIC_BASE_URL", "STOP_REASONS", "AnthropicProvider", "usage"]
