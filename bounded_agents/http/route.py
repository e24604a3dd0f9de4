"""The route class every router of a module uses: the module in the request scope, a bounded
body, and every error answered in this API's body (`bounded_agents.http.errors` says how).

Kept apart from the error mapping so that `errors` stays a leaf: this needs the module's scope
key (`deps`) and the error answers, and neither of them needs it (`errors` used to import
`deps` inside this function, a circle within `http`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from bounded_agents.errors import InvalidInput, echoed
from bounded_agents.http.deps import MODULE_SCOPE_KEY
from bounded_agents.http.errors import BodyTooLarge, ErrorAnswer, native_error_response

if TYPE_CHECKING:
    from bounded_agents.module import AgentModule

log = logging.getLogger("bounded_agents.http")

CLIENT_CLOSED_REQUEST: Final = 499
"""The status of a request whose client left before its body was complete: nginx's "client
closed request". Nobody reads it; it is for access logs and metrics, where a 4xx of its own
tells a client's drop from both a refusal (400, 422) and our fault (5xx)."""


def request_body_limit(module: AgentModule) -> int:
    """The largest request body that can still carry `max_content_bytes` of content.

    JSON may escape every content byte as up to six (``\\u0000``), and a client that escapes
    non-ASCII text (Python's `json.dumps` does by default) sends up to 6x the UTF-8 size. A
    body over this bound cannot hold an acceptable message, so it is refused unread; a body
    under it is checked exactly once decoded.
    """
    return 6 * module.settings.max_content_bytes + 1024


def agent_route_class(
    module: AgentModule, answer: ErrorAnswer = native_error_response
) -> type[APIRoute]:
    """An `APIRoute` subclass bound to `module` (include_router keeps route classes).

    Its handler (1) puts the module in the request scope for `ModuleDep`, (2) refuses an
    oversized body before anything reads it, and (3) turns whatever the route raises into
    the JSON error body with `answer`: domain errors by `STATUS_BY_CODE`, request validation
    as 422/400, anything else as a logged 500 that leaks nothing. A client that leaves before
    its body is complete is no error of ours (`client_gone`).
    """
    body_limit = request_body_limit(module)
    content_limit = module.settings.max_content_bytes

    class AgentRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()
            has_body = self.body_field is not None

            async def guarded(request: Request) -> Response:
                request.scope[MODULE_SCOPE_KEY] = module
                try:
                    if has_body:
                        request = await bounded_body(request, body_limit, content_limit)
                        utf8_only(await request.body())
                    return await handler(request)
                except ClientDisconnect:
                    return client_gone(request)
                except Exception as exc:
                    return answer(exc)

            return guarded

    return AgentRoute


async def bounded_body(request: Request, limit: int, content_limit: int) -> Request:
    """Refuse a body over `limit` bytes: at once when its Content-Length says so, and in any
    case by counting the bytes as they arrive, stopping at the limit (the read body is then
    replayed to the route).

    The count is what holds: a Content-Length header is only a claim. A request that sends
    `Content-Length: 15` and `Transfer-Encoding: chunked` is framed by the chunks, and trusting
    the header let a 150 MB body be read and parsed whole before its 413.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise InvalidInput(f"Content-Length {echoed(declared)} is not a number") from None
        if size > limit:
            raise BodyTooLarge(size, content_limit)
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise BodyTooLarge(total, content_limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    receive = request.receive
    replayed = False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return dict(await receive())  # later calls wait for the disconnect, as before

    return Request(request.scope, replay)


def client_gone(request: Request) -> Response:
    """The answer to a request whose client closed the connection before its body was all
    sent (`ClientDisconnect`, raised by the body's read): one INFO line, no traceback.

    A dropped upload is routine (a mobile client losing its network, a user's Ctrl-C, a
    proxy's timeout), not a bug: answered as an unhandled error, every one logged ERROR with a
    traceback, which pages whoever watches the logs. Nothing was read, so nothing ran and
    nothing is stored. The response is never read; its status is `CLIENT_CLOSED_REQUEST`."""
    log.info(
        "client disconnected before sending its whole request body: %s %s",
        request.method,
        request.url.path,
    )
    return Response(status_code=CLIENT_CLOSED_REQUEST)


def utf8_only(body: bytes) -> None:
    """Refuse a JSON body in UTF-16 or UTF-32 as one that is not UTF-8 (`invalid_json`).

    RFC 8259 (8.1) requires UTF-8 between systems, and the error table says so, but Python's
    `json.loads` reads bytes in any of the five encodings it can guess from the first four:
    such a body ran a turn, while a proxy, a filter or a log reading it as UTF-8 saw other
    text. The refusal is chained to a `UnicodeDecodeError`, as the parser's own would be, so
    both error mappings (native and `/v1`) name the reason."""
    encoding = json.detect_encoding(body[:4])
    if encoding not in ("utf-8", "utf-8-sig"):
        problem = f"JSON must be UTF-8, this is {encoding}"
        raise StarletteHTTPException(400, "There was an error parsing the body") from (
            UnicodeDecodeError("utf-8", body[:4], 0, len(body[:4]), problem)
        )


__all__ = [
    "CLIENT_CLOSED_REQUEST",
    "agent_route_class",
    "bounded_body",
    "client_gone",
    "request_body_limit",
    "utf8_only",
]
