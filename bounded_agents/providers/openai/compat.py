"""A ModelProvider for any server that speaks OpenAI's chat completions API.

OpenAI itself, Ollama, vLLM and llama.cpp all accept the same ``POST {base_url}/chat/completions``
body, so one adapter over httpx covers them. This module is the provider boundary: it turns
httpx and HTTP failures into the ``ProviderError`` tree of ``app.errors`` (with ``from exc``),
so nothing above it ever sees an httpx exception.

Retries (tenacity): timeouts, transport errors, 429 and 5xx are retried with exponential backoff
(a 429's ``Retry-After`` wins, capped); every other 4xx fails at once, and so does a response
that arrived but cannot be understood. A stream is retried only until the server has accepted
it (a 2xx status): once its body has begun, deltas may already be on the user's screen, so a
failure from then on is final (``ProviderBadResponse`` for a cut, ``ProviderTimeout`` for a
stall). Two exceptions, both where the server failed before a single event: a stream that ends
empty is asked again unstreamed, for the server's reason (llama-cpp-python puts a prompt past
its context in its log only), and llama.cpp's `error:` line is its error.

The API key only ever goes into the ``Authorization`` header, and credentials in ``base_url``
(``http://user:password@host/v1``) only into Basic auth: no message or log line holds either.

This module keeps the HTTP calls and the retries; the request body is `wire`'s, reading
an answer `response`'s, reading a stream `stream`'s, and classifying a failure
`failures`'s, each of which can be read without the others.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import unquote

import httpx
from tenacity import RetryCallState

from bounded_agents.core.ports import ModelRequest, ModelResponse, TextDelta
from bounded_agents.core.turn.constants import MAX_ANSWER_CHARS
from bounded_agents.errors import ProviderBadResponse, ProviderError, ProviderTimeout
from bounded_agents.providers.openai.failures import Transient, excerpt, status_failure
from bounded_agents.providers.openai.failures import retry_after as _retry_after
from bounded_agents.providers.openai.response import parse_completion
from bounded_agents.providers.openai.stream import StreamAssembly
from bounded_agents.providers.openai.wire import MAX_TOKENS_FIELDS, chat_body
from bounded_agents.providers.openai.wire import wire_message as _wire_message
from bounded_agents.providers.retries import RetryPolicy, retried

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BODY_BYTES = 8 * MAX_ANSWER_CHARS
"""The most an unstreamed answer's body may hold: eight bytes for each character a streamed
answer may hold (`MAX_ANSWER_CHARS`), room for JSON's escapes; past it, a bad response."""

MAX_WHOLE_BODY_CHARS = 4_000_000
"""The most of a stream's body kept before its first `data:` event, to read as a whole
completion when the server ignored `stream: true` (past it, the step asks again unstreamed)."""


class OpenAICompatibleProvider:
    """Chat completions over HTTP, with ``complete`` and ``stream``.

    Args:
        base_url: The API root, e.g. ``https://api.openai.com/v1`` or
            ``http://localhost:11434/v1`` (Ollama); ``/chat/completions`` is appended.
        api_key: Sent as ``Authorization: Bearer <key>``; ``None`` sends no such header (local
            servers usually want none).
        model: The model name the server knows.
        timeout: Seconds for each of connect, write, read and pool wait, applied per request
            even on an injected client, so this argument always means what it says.
        max_retries: Retries AFTER the first attempt; 0 means a single attempt.
        client: An ``httpx.AsyncClient`` to share (or a test's); the caller keeps ownership.
            Without one the provider builds its own, which ``aclose()`` closes.
        backoff_base: First backoff wait in seconds; it doubles each retry.
        max_retry_wait: Cap on any single wait, a server's ``Retry-After`` included, so a
            misbehaving server cannot park a turn for minutes.
        sleep: How waits are spent; injectable so tests can record them without waiting.
        max_tokens: Cap on the tokens of each answer, sent as ``max_tokens``; ``None`` sends
            none and leaves the length to the server (a small local model may then ramble
            until its context is full). A request's own ``max_tokens`` (the summarizer's)
            replaces it for that call (a summary's budget is its own, not the chat
            answer's); with no cap set here, none is sent for any call.
        max_tokens_field: The request field the cap goes in: ``max_tokens`` (most servers:
            llama.cpp, vLLM, Ollama, older OpenAI models) or ``max_completion_tokens``
            (OpenAI's reasoning models refuse ``max_tokens``).
        prompt_cache_key: Send OpenAI's ``prompt_cache_key``, a hash of the request's
            ``thread_id`` (never the id itself), so a thread's calls are routed to the same
            prompt cache; a request without a thread id sends none.
        prompt_cache_retention: Sent as ``prompt_cache_retention`` when set (OpenAI's
            ``"in_memory"`` or ``"24h"``: a 24-hour cache keeps an idle thread's prefix warm).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float = 60.0,
        max_retries: int = 3,
        client: httpx.AsyncClient | None = None,
        *,
        backoff_base: float = 0.5,
        max_retry_wait: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        max_tokens: int | None = None,
        max_tokens_field: str = "max_tokens",
        prompt_cache_key: bool = False,
        prompt_cache_retention: str | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
        if max_tokens_field not in MAX_TOKENS_FIELDS:
            raise ValueError(
                f"max_tokens_field must be one of {', '.join(MAX_TOKENS_FIELDS)}, "
                f"got {max_tokens_field!r}"
            )
        self.max_tokens = max_tokens
        self.max_tokens_field = max_tokens_field
        self.prompt_cache_key = prompt_cache_key
        self.prompt_cache_retention = prompt_cache_retention
        self.model = model
        url = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        self._auth: httpx.Auth | None = None
        secrets = {api_key, url.password, url.userinfo.decode(), unquote(url.userinfo.decode())}
        self._secrets = sorted((s for s in secrets if s), key=len, reverse=True)
        """Blanked out of every error message, longest first (user info before its password)."""
        if url.username or url.password:
            # Credentials in the URL go out as Basic auth (what httpx did with them) and the URL
            # itself loses them: it appears in error messages, log lines and httpx's own log.
            self._auth = httpx.BasicAuth(url.username, url.password)
            url = url.copy_with(username=None, password=None)
        self.url = str(url)
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.max_retry_wait = max_retry_wait
        self._api_key = api_key
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient()
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(url={self.url!r}, model={self.model!r})"

    async def aclose(self) -> None:
        """Close the client if this provider built it; an injected client is the caller's."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAICompatibleProvider:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- ModelProvider ------------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelResponse:
        try:
            return await self._complete(request)
        except ProviderError as exc:
            self._scrubbed(exc)
            raise

    async def stream(self, request: ModelRequest) -> AsyncIterator[TextDelta | ModelResponse]:
        """Yield a TextDelta per content delta, then the assembled ModelResponse.

        Tool calls arrive as deltas keyed by ``index``: the id and name in the first, the
        arguments as string pieces across the rest; they are joined and parsed at the end.
        """
        try:
            async with contextlib.aclosing(self._stream(request)) as events:
                async for event in events:
                    yield event
        except ProviderError as exc:
            self._scrubbed(exc)
            raise

    def _scrubbed(self, exc: ProviderError) -> ProviderError:
        """`exc` with the API key and the URL's credentials blanked out of its message: a
        server or proxy may echo them back in an error, and the message reaches the client,
        the run record and logs."""
        message = exc.message
        for secret in self._secrets:
            message = message.replace(secret, "[redacted]")
        if message != exc.message:
            exc.message = message
            exc.args = (message,)
        return exc

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        body = self._body(request, stream=False)

        async def attempt() -> bytes:
            http_request = self._client.build_request(
                "POST", self.url, json=body, headers=self._headers(), timeout=self._timeouts()
            )
            try:
                response = await self._client.send(
                    http_request, stream=True, auth=self._auth or httpx.USE_CLIENT_DEFAULT
                )
            except httpx.HTTPError as exc:
                raise self._transport_failure(exc) from exc
            try:
                content = await _bounded_body(response)
            except httpx.HTTPError as exc:
                raise self._transport_failure(exc) from exc
            finally:
                await response.aclose()
            if not response.is_success:
                raise status_failure(response.status_code, response.headers, content)
            return content

        content = await self._retrying(attempt)
        try:
            data = json.loads(content)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past the limit
            raise ProviderBadResponse(
                f"provider returned invalid JSON: {excerpt(content)}"
            ) from exc
        return parse_completion(data, request, self.model)

    async def _stream(
        self, request: ModelRequest
    ) -> AsyncGenerator[TextDelta | ModelResponse, None]:
        body = self._body(request, stream=True)

        async def attempt() -> httpx.Response:
            http_request = self._client.build_request(
                "POST",
                self.url,
                json=body,
                headers={**self._headers(), "Accept": "text/event-stream"},
                timeout=self._timeouts(),
            )
            try:
                response = await self._client.send(
                    http_request, stream=True, auth=self._auth or httpx.USE_CLIENT_DEFAULT
                )
            except httpx.HTTPError as exc:
                raise self._transport_failure(exc) from exc
            if response.is_success:
                return response
            try:
                content = await response.aread()
            except httpx.HTTPError as exc:
                raise self._transport_failure(exc) from exc
            finally:
                await response.aclose()
            raise status_failure(response.status_code, response.headers, content)

        response = await self._retrying(attempt)
        assembly = StreamAssembly(default_model=self.model)
        whole_body: list[str] = []  # what came before any `data:` event, bounded
        kept = 0
        try:
            async for line in response.aiter_lines():
                if not assembly.seen_data and kept < MAX_WHOLE_BODY_CHARS:
                    whole_body.append(line)
                    kept += len(line)
                delta = assembly.feed(line)
                if delta:
                    yield TextDelta(text=delta)
                if assembly.done:
                    break
        except httpx.TimeoutException as exc:
            raise ProviderTimeout(
                f"stream from {self.url} stalled for more than {self.timeout}s"
            ) from exc
        except httpx.HTTPError as exc:
            raise ProviderBadResponse(f"stream from {self.url} was cut off: {exc}") from exc
        finally:
            await response.aclose()
        if not assembly.done and not assembly.seen_data and kept < MAX_WHOLE_BODY_CHARS:
            # A server that ignores `stream: true` and answers with the whole completion: that
            # answer, already paid for, is the step's (found by attack: it was thrown away and
            # the step asked again, two calls billed for one booked).
            whole = _completion(whole_body, request, self.model)
            if whole is not None:
                if whole.content:
                    yield TextDelta(text=whole.content)
                yield whole
                return
        if not assembly.done and not assembly.seen_data:
            # A 200 stream that ended without a single event: llama-cpp-python's server answers
            # a prompt past its context so, its reason only in its own log. The same request
            # unstreamed is answered with that reason (or, if it was a fluke, with the answer).
            logger.warning("the stream from %s ended empty; asking again unstreamed", self.url)
            whole = await self._complete(request)
            if whole.content:
                yield TextDelta(text=whole.content)
            yield whole
            return
        yield assembly.result(request)

    # --- request ------------------------------------------------------------------------------

    def _body(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        return chat_body(
            request,
            model=self.model,
            stream=stream,
            max_tokens=self.max_tokens,
            max_tokens_field=self.max_tokens_field,
            prompt_cache_key=self.prompt_cache_key,
            prompt_cache_retention=self.prompt_cache_retention,
        )

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _timeouts(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout)

    # --- retries ------------------------------------------------------------------------------

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt`, retrying `Transient` failures (`bounded_agents.providers.retries`)."""
        policy = RetryPolicy(self.max_retries, self.backoff_base, self.max_retry_wait, self._sleep)
        return await retried(attempt, policy, self._log_retry)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        if isinstance(exc, Transient):
            exc = self._scrubbed(exc.final)
        logger.warning(
            "model call to %s failed (attempt %d of %d): %s; retrying in %.2fs",
            self.url,
            state.attempt_number,
            self.max_retries + 1,
            exc,
            wait,
        )

    def _transport_failure(self, exc: httpx.HTTPError) -> Transient:
        if isinstance(exc, httpx.TimeoutException):
            return Transient(ProviderTimeout(f"no answer from {self.url} within {self.timeout}s"))
        return Transient(ProviderError(f"could not talk to {self.url}: {exc!r}"))


async def _bounded_body(response: httpx.Response) -> bytes:
    """The response's body, read up to `MAX_BODY_BYTES`: an unstreamed answer larger than any
    real one is refused as it arrives, never held whole (found by attack for streams; a body
    that never ends would otherwise grow the process until the call's deadline)."""
    parts: list[bytes] = []
    size = 0
    async for part in response.aiter_bytes():
        size += len(part)
        if size > MAX_BODY_BYTES:
            raise ProviderBadResponse(
                f"the provider's answer passed {MAX_BODY_BYTES:,} bytes: not a real answer"
            )
        parts.append(part)
    return b"".join(parts)


def _completion(lines: list[str], request: ModelRequest, model: str) -> ModelResponse | None:
    """A stream's body read as one chat completion (a server that answered `stream: true`
    whole), or None when it is not one (an empty body: asked again unstreamed)."""
    text = "\n".join(lines).strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or "choices" not in data:
        return None
    return parse_completion(data, request, model)


__all__ = [
    "MAX_TOKENS_FIELDS",
    "OpenAICompatibleProvider",
    "_retry_after",
    "_wire_message",
]
