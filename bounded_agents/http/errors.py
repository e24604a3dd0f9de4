"""The one place that knows HTTP status codes: `AgentError.code` -> status, and the error body.

Every error leaves as ``{"error": {"code": ..., "message": ...}}`` (a failed run adds a top-level
``"run_id"``, and so does `turn_in_progress`, naming the run still running). Two layers apply it,
on purpose:

- `AgentRoute` (`bounded_agents.http.route`), the router's ``route_class``, catches what a
  route raises (domain errors, request validation, anything unexpected) and answers with the
  JSON body itself. So the routes keep their contract in ANY host app, even one that never
  calls `install_error_handlers`, and
  a host's own handlers for the same exception types cannot change our routes' answers.
- `install_error_handlers(app)` covers what happens outside our routes: an unknown path (404),
  a wrong method (405), and anything else a host's own routes raise; a 404 or 405 under `/v1`
  in OpenAI's shape (`openai_error`), as the `/v1` routes answer. `app.main` calls it; a host
  app may call it too, or keep its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from http import HTTPStatus
from types import MappingProxyType
from typing import Any, Final

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from bounded_agents.errors import (
    AgentError,
    AnswerErased,
    ContentTooLarge,
    RecordedFailure,
    RunFailed,
    TurnInProgress,
    clipped,
)

log = logging.getLogger("bounded_agents.http")

STATUS_BY_CODE: Final[Mapping[str, int]] = MappingProxyType(
    {
        # the caller's fault
        "invalid_json": 400,
        "unauthorized": 401,
        "not_found": 404,
        "agent_not_found": 404,
        "thread_not_found": 404,
        "run_not_found": 404,
        "journal_pruned": 410,
        "journal_erased": 410,  # a run an erasure failed: its journal is gone with the content
        "answer_erased": 410,
        "method_not_allowed": 405,
        "thread_busy": 409,
        "turn_in_progress": 409,
        "lease_lost": 409,
        "run_completed": 409,
        "duplicate_message": 409,
        "content_too_large": 413,
        "invalid_input": 422,
        "invalid_content": 422,
        "idempotency_key_reused": 422,
        "invalid_parameter": 400,  # the /v1 API's: OpenAI answers a bad parameter with 400
        "unsupported_parameter": 400,
        "validation_error": 422,
        "quota_exceeded": 429,
        # ours, or a dependency's
        "internal_error": 500,
        "config_error": 500,
        "journal_mismatch": 500,
        "provider_error": 502,
        "provider_timeout": 502,
        "provider_rate_limited": 502,
        "provider_bad_response": 502,
        "provider_context_exceeded": 502,
        "store_error": 503,
    }
)
"""Error code -> HTTP status. A code missing here (a user's own `AgentError` subclass) takes the
status of the nearest base class whose code is listed, else 500. `RunFailed` is never looked
up itself: a failed run answers with its cause's code and status."""

INTERNAL_MESSAGE: Final = "internal error"
_SHOWN_5XX: Final = frozenset({502, 503})
"""5xx statuses whose messages are shown: they name a dependency (provider, database), never
our internals. Other 5xx messages are logged and replaced by `INTERNAL_MESSAGE`."""


class Unauthorized(AgentError):
    """No actor: a missing or unknown API key. Lives here because only the HTTP edge has it."""

    code = "unauthorized"

    def __init__(self, hint: str = "") -> None:
        super().__init__(f"a valid API key is required (Authorization: Bearer <key>){hint}")


PAIR_AS_TOKEN_HINT: Final = (
    "; the token looks like an AGENT_API_KEYS pair (key=actor): send the key alone"
)
"""Added to a 401 whose bearer token holds `=`: a newcomer who copied `key1=alice` from the
setting. It says nothing of whether the key part is valid."""

JSON_TYPE_HINT: Final = (
    "; the body was not read as JSON: send it with the header Content-Type: application/json"
)
"""Added to a 422 whose body FastAPI left as bytes: it reads a body as JSON only under a JSON
content type, and `curl -d` sends `application/x-www-form-urlencoded`."""


def body_not_read_as_json(error: RequestValidationError) -> bool:
    """Whether the request's body failed validation as raw bytes (its content type was not
    JSON), not as a JSON value of the wrong shape."""
    return any(
        tuple(p.get("loc", ())) == ("body",) and isinstance(p.get("input"), bytes)
        for p in error.errors()
    )


class BodyTooLarge(ContentTooLarge):
    """The request body alone rules the content out: refused before it is read or parsed."""

    def __init__(self, body_bytes: int, content_limit: int) -> None:
        AgentError.__init__(
            self,
            f"request body is {body_bytes} bytes, too large to carry content of at most "
            f"{content_limit} bytes",
        )
        self.size = body_bytes
        self.limit = content_limit


def status_for(error: BaseException) -> int:
    """The status of an error; a failed run takes its cause's."""
    if isinstance(error, RunFailed):
        return status_for(error.cause)
    if isinstance(error, RecordedFailure):
        return STATUS_BY_CODE.get(error.recorded_code, 500)
    if not isinstance(error, AgentError):
        return 500
    for cls in type(error).__mro__:
        code = getattr(cls, "code", None)
        if isinstance(code, str) and code in STATUS_BY_CODE:
            return STATUS_BY_CODE[code]
    return 500


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    run_id: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"error": {"code": code, "message": message}}
    if run_id is not None:
        body["run_id"] = run_id
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def error_payload(error: AgentError) -> tuple[int, str, str, str | None]:
    """(status, code, message, run_id) of a domain error, as clients see it."""
    run_id: str | None = None
    cause: BaseException = error
    if isinstance(error, RunFailed):
        run_id, cause = error.run_id, error.cause
    elif isinstance(error, TurnInProgress | AnswerErased):
        run_id = error.run_id  # the run to wait for (`GET /runs/{id}`), named as a failed one is
    status = status_for(cause)
    if isinstance(cause, RecordedFailure):
        code, message = cause.recorded_code, cause.message
    elif isinstance(cause, AgentError):
        code, message = cause.code, cause.message
    else:
        code, message = "internal_error", INTERNAL_MESSAGE
    if status >= 500 and status not in _SHOWN_5XX:
        log.error("%s (run %s): %s", code, run_id, message, exc_info=cause)
        message = INTERNAL_MESSAGE
    return status, code, message, run_id


def public_message(code: str, message: str) -> str:
    """What a client may read of a stored error: nothing of our internals (a 500-class code)."""
    status = STATUS_BY_CODE.get(code)
    if status is not None and status >= 500 and status not in _SHOWN_5XX:
        return INTERNAL_MESSAGE
    return message


def agent_error_response(error: AgentError) -> JSONResponse:
    status, code, message, run_id = error_payload(error)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return error_response(status, code, message, run_id=run_id, headers=headers)


def validation_error_response(error: RequestValidationError) -> JSONResponse:
    """422 `validation_error` naming each bad field; a body that is not JSON at all is a 400
    `invalid_json`."""
    problems = list(error.errors())
    for problem in problems:
        if problem.get("type") == "json_invalid":
            reason = (problem.get("ctx") or {}).get("error", "JSON decode error")
            loc = problem.get("loc", ())
            where = f" at position {loc[-1]}" if len(loc) > 1 else ""
            return error_response(
                STATUS_BY_CODE["invalid_json"],
                "invalid_json",
                f"request body is not valid JSON: {reason}{where}",
            )
    hint = JSON_TYPE_HINT if body_not_read_as_json(error) else ""
    return error_response(
        STATUS_BY_CODE["validation_error"], "validation_error", validation_message(error) + hint
    )


def validation_message(error: RequestValidationError) -> str:
    """Each bad field, named by where it is (`content`, `before`), and what is wrong with it;
    never the value sent."""
    parts = []
    for problem in error.errors():
        loc = [clipped(str(p)) for p in problem.get("loc", ())]  # a body's key is the caller's
        if len(loc) > 1 and loc[0] in ("body", "path", "query", "header"):
            loc = loc[1:]  # "content", not "body.content"; a bad body as a whole stays "body"
        msg = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{'.'.join(loc) or 'request'}: {msg}")
    return "; ".join(parts) or "invalid request"


_HTTP_CODES: Final[Mapping[int, str]] = MappingProxyType(
    {
        400: "bad_request",
        401: "unauthorized",
        404: "not_found",
        405: "method_not_allowed",
        413: "content_too_large",
    }
)


def http_error_code(status: int) -> str:
    """The code of a refusal known by its status alone (Starlette's 404 for no route, 405 for
    a wrong method): the native and the `/v1` answers name it alike."""
    return _HTTP_CODES.get(status, "http_error")


def http_exception_response(error: StarletteHTTPException) -> JSONResponse:
    """Starlette's own refusals (no such route, wrong method) in our body shape.

    FastAPI reports a body its JSON parser gave up on (invalid UTF-8, nesting past the recursion
    limit) as a bare 400 chained to the parser's error; that is `invalid_json` too, with the
    reason, so a client sees one code for every body that is not JSON.
    """
    reason = unparsable_body(error)
    if reason is not None:
        return error_response(
            STATUS_BY_CODE["invalid_json"],
            "invalid_json",
            f"request body is not valid JSON: {reason}",
        )
    code = http_error_code(error.status_code)
    return error_response(
        error.status_code, code, str(error.detail), headers=dict(error.headers or {})
    )


OPENAI_PREFIX: Final = "/v1"
"""Where the OpenAI-compatible API lives (`bounded_agents.http.openai.api` mounts its routes
here): a path under it that no route takes is refused in that API's shape."""


def openai_error(
    status: int,
    code: str,
    message: str,
    *,
    param: str | None = None,
    response_id: str | None = None,
    retry: bool | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """An error in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, which the
    `openai` SDK parses. It lives here, not in `bounded_agents.http.openai.errors` (which maps
    the `/v1` routes' errors to it), because `install_error_handlers` answers `/v1` paths no
    route takes, and this module imports nothing of the `/v1` package."""
    if status == 429:
        kind = "insufficient_quota"
    elif status >= 500:
        kind = "server_error"
    else:
        kind = "invalid_request_error"
    body: dict[str, Any] = {
        "error": {"message": message, "type": kind, "param": param, "code": code}
    }
    if response_id is not None:
        body["response_id"] = response_id
    sent = dict(headers or {})
    if retry is not None:
        sent["x-should-retry"] = "true" if retry else "false"
    if status == 401:
        sent["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, headers=sent)


def openai_http_exception_response(error: StarletteHTTPException) -> JSONResponse:
    """`http_exception_response` in OpenAI's shape: the same code, reason and headers (a 405
    keeps its `Allow`)."""
    reason = unparsable_body(error)
    if reason is not None:
        return openai_error(400, "invalid_json", f"request body is not valid JSON: {reason}")
    return openai_error(
        error.status_code,
        http_error_code(error.status_code),
        str(error.detail),
        headers=error.headers,
    )


def routing_miss(error: StarletteHTTPException) -> bool:
    """Whether the router raised `error` because no route serves the path or its method
    (404, 405 with Starlette's own words), or a body no route could parse: this server's to
    answer. An HTTP error a host app's own `/v1` route raises keeps its shape and headers (a
    401's `WWW-Authenticate` was replaced with `Bearer`, found by review)."""
    if unparsable_body(error) is not None:
        return True
    return error.status_code in (404, 405) and error.detail == HTTPStatus(error.status_code).phrase


def under_openai_prefix(request: Request) -> bool:
    """Whether the request's path (below the app's `root_path`) is `OPENAI_PREFIX` or under it."""
    path = str(request.scope.get("path", ""))
    root = str(request.scope.get("root_path", ""))
    if root and path.startswith(root):  # Starlette matches routes on the path below root_path
        path = path[len(root) :]
    return path == OPENAI_PREFIX or path.startswith(OPENAI_PREFIX + "/")


def internal_error_response(error: BaseException) -> JSONResponse:
    log.error("unhandled error", exc_info=error)
    return error_response(500, "internal_error", INTERNAL_MESSAGE)


def native_error_response(error: Exception) -> Response:
    """The answer to whatever a route raised, in this API's error body."""
    if isinstance(error, AgentError):
        return agent_error_response(error)
    if isinstance(error, RequestValidationError):
        return validation_error_response(error)
    if isinstance(error, StarletteHTTPException):
        return http_exception_response(error)
    return internal_error_response(error)


ErrorAnswer = Callable[[Exception], Response]
"""Turns what a route raised into its answer (`native_error_response`, or the /v1 API's)."""


def install_error_handlers(app: FastAPI) -> None:
    """Give the whole app the same error body: unknown routes, wrong methods, validation and
    domain errors raised by the host's own routes, and a catch-all 500 that logs the
    traceback and never leaks it. An unknown route or wrong method under `/v1` answers in
    OpenAI's shape, as the `/v1` routes do: a client of that API (the `openai` SDK calling
    `responses.delete`, `chat.completions.create`) parses no other."""

    async def on_agent_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AgentError)
        return agent_error_response(exc)

    async def on_validation(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return validation_error_response(exc)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if under_openai_prefix(request) and routing_miss(exc):  # an OpenAI SDK reads these
            return openai_http_exception_response(exc)
        return http_exception_response(exc)

    async def on_unexpected(_request: Request, exc: Exception) -> Response:
        return internal_error_response(exc)

    app.add_exception_handler(AgentError, on_agent_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)


def unparsable_body(error: StarletteHTTPException) -> str | None:
    """Why a 400 the body parser raised could not read the body (None: not that kind of 400):
    the native and the `/v1` mappings both answer it as `invalid_json` with this reason."""
    if error.status_code != 400:
        return None
    cause = error.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return "it is not UTF-8"
    if isinstance(cause, RecursionError):
        return "it nests too deeply"
    if isinstance(cause, ValueError):  # Python's parser refuses integers of over 4300 digits
        return "it holds a number too long to read"
    return None
