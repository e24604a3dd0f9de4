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
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import unquote

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from bounded_agents.core.messages import ChatMessage, ToolCall
from bounded_agents.core.ports import (
    MAX_CALL_TOKENS,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolSpec,
    Usage,
)
from bounded_agents.core.tokens import estimate_usage
from bounded_agents.errors import (
    ProviderBadResponse,
    ProviderContextExceeded,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

_ERROR_TEXT_LIMIT = 500
"""How much of an unparseable error body goes into an error message."""


MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")
"""Where a server takes the answer's token cap: most take `max_tokens`; OpenAI's reasoning
models refuse it and want `max_completion_tokens`."""


class _Transient(Exception):
    """An attempt failed in a way worth retrying; carries the error to raise if retries run out."""

    def __init__(self, final: ProviderError, retry_after: float | None = None) -> None:
        super().__init__(final.message)
        self.final = final
        self.retry_after = retry_after


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

        async def attempt() -> httpx.Response:
            try:
                response = await self._client.post(
                    self.url,
                    json=body,
                    headers=self._headers(),
                    timeout=self._timeouts(),
                    auth=self._auth or httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.HTTPError as exc:
                raise self._transport_failure(exc) from exc
            if not response.is_success:
                raise _status_failure(response.status_code, response.headers, response.content)
            return response

        response = await self._retrying(attempt)
        try:
            data = response.json()
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past the limit
            raise ProviderBadResponse(
                f"provider returned invalid JSON: {_excerpt(response.content)}"
            ) from exc
        return self._parse_completion(data, request)

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
            raise _status_failure(response.status_code, response.headers, content)

        response = await self._retrying(attempt)
        assembly = _StreamAssembly(default_model=self.model)
        try:
            async for line in response.aiter_lines():
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
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in request.messages],
            "stream": stream,
        }
        if request.tools:
            body["tools"] = [_wire_tool(t) for t in request.tools]
        if self.max_tokens is not None:
            # Sent only where the deployment set a cap: some servers refuse `max_tokens`
            # (OpenAI's reasoning models want `max_completion_tokens`). A request's own cap
            # (the summarizer's) is its own budget, not lowered by the chat answer's: a summary
            # allowed 3,000 words must not be cut at the chat's 256 tokens.
            body[self.max_tokens_field] = request.max_tokens or self.max_tokens
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _timeouts(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout)

    # --- retries ------------------------------------------------------------------------------

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run `attempt`, retrying `_Transient` failures; then raise the final error."""
        kwargs: dict[str, Any] = {} if self._sleep is None else {"sleep": self._sleep}
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Transient),
            reraise=True,
            before_sleep=self._log_retry,
            **kwargs,
        )
        try:
            result: T = await retrying(attempt)
        except _Transient as exc:
            raise exc.final from exc.__cause__
        return result

    def _wait(self, state: RetryCallState) -> float:
        """Exponential from `backoff_base`; a 429's Retry-After instead; both capped."""
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Transient) and exc.retry_after is not None:
            return min(exc.retry_after, self.max_retry_wait)
        backoff: float = self.backoff_base * 2.0 ** (state.attempt_number - 1)
        return min(backoff, self.max_retry_wait)

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        if isinstance(exc, _Transient):
            exc = self._scrubbed(exc.final)
        logger.warning(
            "model call to %s failed (attempt %d of %d): %s; retrying in %.2fs",
            self.url,
            state.attempt_number,
            self.max_retries + 1,
            exc,
            wait,
        )

    def _transport_failure(self, exc: httpx.HTTPError) -> _Transient:
        if isinstance(exc, httpx.TimeoutException):
            return _Transient(ProviderTimeout(f"no answer from {self.url} within {self.timeout}s"))
        return _Transient(ProviderError(f"could not talk to {self.url}: {exc!r}"))

    # --- response -----------------------------------------------------------------------------

    def _parse_completion(self, data: Any, request: ModelRequest) -> ModelResponse:
        try:
            message = data["choices"][0]["message"]
            content = message.get("content") or ""
            raw_calls = message.get("tool_calls") or []
            if not isinstance(content, str) or not isinstance(raw_calls, list):
                raise TypeError("content must be a string and tool_calls a list")
            calls = [
                _tool_call(c["id"], c["function"]["name"], c["function"].get("arguments"))
                for c in raw_calls
            ]
            usage = _usage(data.get("usage"), data.get("timings"))
            model = data.get("model") or self.model
        except (KeyError, IndexError, TypeError, AttributeError, ValueError, OverflowError) as exc:
            raise ProviderBadResponse(
                f"provider response is not a chat completion ({exc!r}): {_excerpt(data)}"
            ) from exc
        if usage is None:
            usage = estimate_usage(request, content, calls)
        return ModelResponse(
            content=content,
            tool_calls=calls,
            usage=usage,
            model=str(model),
            finish_reason=_finish_reason(data["choices"][0]),
        )


class _StreamAssembly:
    """Folds SSE lines of a streamed completion into text deltas and one final response."""

    def __init__(self, default_model: str) -> None:
        self.done = False
        self._model = default_model
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage: Usage | None = None
        self._finish_reason: str | None = None
        self.seen_data = False
        """Whether any `data:` event came: a stream that ends with none said nothing at all."""

    def feed(self, line: str) -> str:
        """Take one line; return the content it adds ("" for none)."""
        if line.startswith("error:"):
            # llama.cpp's server sends a failure after the 200 (a prompt past its context) as an
            # `error: {...}` line of its own, not as a `data:` event.
            raise ProviderError(f"provider failed mid-stream: {_stream_error(line[6:].strip())}")
        if not line.startswith("data:"):
            return ""  # blank separators, ": keep-alive" comments, event:/id: fields
        self.seen_data = True
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = json.loads(payload)
        except (ValueError, RecursionError) as exc:
            raise ProviderBadResponse(f"stream sent invalid JSON: {_excerpt(payload)}") from exc
        try:
            return self._apply(chunk)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError, OverflowError) as exc:
            raise ProviderBadResponse(
                f"stream chunk is not a chat completion chunk ({exc!r}): {_excerpt(payload)}"
            ) from exc

    def _apply(self, chunk: dict[str, Any]) -> str:
        if "error" in chunk:
            raise ProviderError(f"provider failed mid-stream: {_error_message(chunk)}")
        if chunk.get("model"):
            self._model = str(chunk["model"])
        if chunk.get("usage"):
            self._usage = _usage(chunk["usage"], chunk.get("timings"))
        text = ""
        for choice in chunk.get("choices") or []:
            self._finish_reason = _finish_reason(choice) or self._finish_reason
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if piece:
                if not isinstance(piece, str):
                    raise TypeError("delta content must be a string")
                text += piece
            for call in delta.get("tool_calls") or []:
                slot = self._calls.setdefault(
                    int(call["index"]), {"id": "", "name": "", "args": []}
                )
                function = call.get("function") or {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] = function.get("name") or slot["name"]
                if function.get("arguments"):
                    slot["args"].append(function["arguments"])
        self._content.append(text)
        return text

    def result(self, request: ModelRequest) -> ModelResponse:
        """The whole answer; its usage estimated when the server sent none (a server that
        ignores `stream_options.include_usage`)."""
        if not self.done:
            raise ProviderBadResponse("stream ended before its [DONE] marker")
        calls = []
        for index in sorted(self._calls):
            slot = self._calls[index]
            if not slot["id"] or not slot["name"]:
                raise ProviderBadResponse(f"streamed tool call {index} has no id or name")
            calls.append(_tool_call(slot["id"], slot["name"], "".join(slot["args"])))
        content = "".join(self._content)
        usage = self._usage or estimate_usage(request, content, calls)
        return ModelResponse(
            content=content,
            tool_calls=calls,
            usage=usage,
            model=self._model,
            finish_reason=self._finish_reason,
        )


# --- wire shapes ---------------------------------------------------------------------------


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        # OpenAI's documented shape for a pure tool-call turn is content null, not "".
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
    return out


def _wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


def _tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    """Arguments arrive as a JSON string (some servers send an object); a call needs an object.

    An empty string means no arguments: some servers send it for parameterless tools.
    """
    if not isinstance(call_id, str) or not isinstance(name, str) or not call_id or not name:
        raise ProviderBadResponse(f"tool call has no usable id or name: {call_id!r}, {name!r}")
    parsed: Any = arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        parsed = {}
    elif isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise ProviderBadResponse(
                f"arguments of tool call {name!r} are not valid JSON: {_excerpt(arguments)}"
            ) from exc
    if not isinstance(parsed, dict):
        raise ProviderBadResponse(
            f"arguments of tool call {name!r} are not a JSON object: {_excerpt(arguments)}"
        )
    return ToolCall(id=call_id, name=name, arguments=parsed)


def _usage(raw: Any, timings: Any = None) -> Usage | None:
    """The server's own count, or None when it sent none (some local servers never do).

    A count that is negative, fractional or over `MAX_CALL_TOKENS` is a bad response: booking
    it would hand the actor unlimited quota (negative) or a bill no call can run up.
    Cached prompt tokens come from OpenAI's `usage.prompt_tokens_details.cached_tokens` (also
    what vLLM and newer llama.cpp `llama-server` builds send), else from llama-server's
    `timings.cache_n`; a server sending neither (llama-cpp-python's) leaves them unknown.
    """
    if raw is None or (
        isinstance(raw, dict)
        and raw.get("prompt_tokens") is None
        and raw.get("completion_tokens") is None
    ):
        return None
    counts: dict[str, int] = {}
    for name in ("prompt_tokens", "completion_tokens"):
        counts[name] = _count(name, raw.get(name) or 0)
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None and isinstance(timings, dict):
        cached = timings.get("cache_n")
    return Usage(
        **counts, cached_tokens=None if cached is None else _count("cached_tokens", cached)
    )


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ProviderBadResponse(f"usage {name} is not a whole number: {_excerpt(value)}")
    if not 0 <= value <= MAX_CALL_TOKENS:
        raise ProviderBadResponse(
            f"usage {name} is {int(value)}, outside 0..{MAX_CALL_TOKENS}: not booked"
        )
    return int(value)


# --- errors --------------------------------------------------------------------------------


def _finish_reason(choice: Any) -> str | None:
    reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return reason[:40] if isinstance(reason, str) and reason else None


_CONTEXT_EXCEEDED = re.compile(
    r"context[_ ](length|window)|maximum context|too many tokens|prompt is too long|"
    r"exceeds? (the )?(available )?context",
    re.IGNORECASE,
)
"""How servers word "the prompt is longer than the model's context": OpenAI's code
`context_length_exceeded`, llama.cpp's "exceed context window of 2048", vLLM's "maximum context
length", Anthropic's "prompt is too long"."""


def _status_failure(status: int, headers: httpx.Headers, content: bytes) -> Exception:
    """Classify a non-2xx answer: 429 and 5xx are transient, any other status is final; a
    400/413 that says the context was exceeded is `ProviderContextExceeded` (a fold splits its
    chunk on it)."""
    message = _error_message_from_body(content)
    text = f"provider returned HTTP {status}: {message}"
    if status == 429:
        return _Transient(ProviderRateLimited(text), retry_after=_retry_after(headers))
    if status >= 500:
        return _Transient(ProviderError(text))
    if status in (400, 413, 422) and (
        _CONTEXT_EXCEEDED.search(message) or b"context_length_exceeded" in content[:4096]
    ):
        return ProviderContextExceeded(text)
    return ProviderError(text)


def _error_message_from_body(content: bytes) -> str:
    try:
        data = json.loads(content)
    except (ValueError, RecursionError):
        return _excerpt(content.decode("utf-8", "replace")) or "(empty body)"
    return _error_message(data)


def _error_message(data: Any) -> str:
    """OpenAI nests ``{"error": {"message"}}``; Ollama and others send ``{"error": "..."}``."""
    if isinstance(data, dict):
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            return message
        if isinstance(error, str):
            return error
    return _excerpt(data)


def _stream_error(payload: str) -> str:
    """The message of llama.cpp's `error:` line: ``{"code", "message", "type"}``."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return _excerpt(payload)
    message = data.get("message") if isinstance(data, dict) else None
    return message if isinstance(message, str) else _error_message(data)


def _retry_after(headers: httpx.Headers) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(seconds, 0.0)


def _excerpt(value: Any) -> str:
    text = (
        value
        if isinstance(value, str)
        else (value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value))
    )
    return text[:_ERROR_TEXT_LIMIT] + ("…" if len(text) > _ERROR_TEXT_LIMIT else "")
