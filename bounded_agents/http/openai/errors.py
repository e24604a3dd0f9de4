"""The `/v1` API's errors, in OpenAI's shape `{"error": {"message", "type", "param", "code"}}`
(the body itself is `bounded_agents.http.errors.openai_error`, which `install_error_handlers`
needs too, for a `/v1` path no route takes).

`code` is this project's stable code (`thread_busy`, `provider_timeout`, ...), the status is
the native API's except that a request that does not validate is a 400, as OpenAI answers it. A
turn that started and failed adds `"response_id"` and `x-should-retry: false` (the SDK would
otherwise retry a 5xx, and a retry is a second turn); so does a spent quota, which no retry can
fix. One mapping for every `/v1` route, so the SDK's error classes see the same fields on each.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, Final

from fastapi import Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from bounded_agents.errors import (
    AgentError,
    AgentNotFound,
    InvalidContent,
    InvalidInput,
    RunNotFound,
    ThreadNotFound,
    clipped,
    echoed,
)
from bounded_agents.http.errors import (
    INTERNAL_MESSAGE,
    JSON_TYPE_HINT,
    body_not_read_as_json,
    error_payload,
    openai_error,
    openai_http_exception_response,
)

log = logging.getLogger("bounded_agents.http")


class InvalidParameter(InvalidInput):
    """A request parameter this API cannot accept; `param` names it, as OpenAI errors do."""

    code = "invalid_parameter"

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class UnsupportedParameter(InvalidParameter):
    code = "unsupported_parameter"


class UnstorableParameter(InvalidContent):
    """Text a store refused (a NUL, a lone surrogate) in a parameter other than `input`, which
    `invalid_content` names by default: `param` names it (`metadata.title`)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class PreviousResponseNotFound(RunNotFound):
    param: ClassVar[str] = "previous_response_id"


_PARAM_BY_CODE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "thread_not_found": "conversation",
        "agent_not_found": "model",
        "content_too_large": "input",
        "invalid_content": "input",
    }
)


def agent_error(error: AgentError) -> JSONResponse:
    status, code, message, run_id = error_payload(error)
    cause = getattr(error, "cause", error)
    if isinstance(cause, ThreadNotFound):
        message = f"conversation {echoed(cause.thread_id)} not found"
    elif isinstance(cause, RunNotFound):
        message = f"response {echoed(cause.run_id)} not found"
    elif isinstance(cause, AgentNotFound):
        message = f"no agent named {echoed(cause.agent)} (a model here is an agent's name)"
    param = getattr(cause, "param", None) or _PARAM_BY_CODE.get(code)
    retry = False if run_id is not None or code in ("quota_exceeded", "answer_erased") else None
    if code == "turn_in_progress":
        retry = True  # the same request, retried, gets the turn's answer once it ends
    return openai_error(
        400 if status == 422 and code != "idempotency_key_reused" else status,
        code,
        message,
        param=param,
        response_id=run_id,
        retry=retry,
    )


def validation_error(error: RequestValidationError) -> JSONResponse:
    problems = list(error.errors())
    for problem in problems:
        loc = [clipped(str(p)) for p in problem.get("loc", ())]  # a body's key is the caller's
        if loc and loc[0] in ("body", "path", "query", "header"):
            loc = loc[1:]
        param = ".".join(loc) or None
        kind = problem.get("type")
        ctx = problem.get("ctx") or {}
        if kind in _NAMED_PARAM_CODES and isinstance(ctx.get("param"), str):
            # a check that names the parameter itself (`refuse_unsupported_input`)
            message = str(problem.get("msg", "invalid"))
            return openai_error(400, str(kind), message, param=ctx["param"])
        if kind == "json_invalid":
            return openai_error(400, "invalid_json", "request body is not valid JSON")
        if kind == "extra_forbidden":
            return openai_error(
                400, "unknown_parameter", f"Unknown parameter: {param!r}.", param=param
            )
        msg = str(problem.get("msg", "invalid")).removeprefix("Value error, ")
        hint = JSON_TYPE_HINT if body_not_read_as_json(error) else ""
        return openai_error(
            400, "validation_error", f"{param or 'request'}: {msg}{hint}", param=param
        )
    return openai_error(400, "validation_error", "invalid request")


_NAMED_PARAM_CODES: Final = frozenset(
    {"invalid_parameter", "unsupported_parameter", "unknown_parameter"}
)
"""Validation error types that are `/v1` codes: their context's `param` names the parameter
(`schemas.refuse_unsupported_input`), where a loc would hold the schema's union members."""


def openai_error_response(error: Exception) -> Response:
    """The answer to whatever a `/v1` route raised, in OpenAI's error shape."""
    if isinstance(error, AgentError):
        return agent_error(error)
    if isinstance(error, RequestValidationError):
        return validation_error(error)
    if isinstance(error, StarletteHTTPException):
        return openai_http_exception_response(error)
    log.error("unhandled error", exc_info=error)
    return openai_error(500, "internal_error", INTERNAL_MESSAGE)


__all__ = [
    "InvalidParameter",
    "PreviousResponseNotFound",
    "UnstorableParameter",
    "UnsupportedParameter",
    "openai_error",
    "openai_error_response",
]
