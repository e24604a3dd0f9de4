"""The inspector: server-rendered pages that show what each turn of a thread sent its model.

    GET  /inspect                          the actor's threads, newest activity first (?page=)
    GET  /inspect/threads/{id}             a thread's timeline: a bar per turn (?before=)
    GET  /inspect/threads/{id}/timeline    the timeline alone: what the page polls while live
    GET  /inspect/runs/{id}                a run's report: model calls, reads, journal, ledger
    GET  /inspect/login, POST /inspect/login, POST /inspect/logout
    GET  /inspect/static/{inspector.js,inspector.css}

Everything is read with JavaScript off; the one script (ours, served from the package) only
re-fetches the timeline while a page is open, so a turn in flight appears and moves. Templates
are Jinja2 with autoescaping on for every value (a message holding `<script>` is shown as text),
and the pages are sent with a Content-Security-Policy that allows no inline script at all.

Who is asking is the module's own actor resolver, exactly as for the API. A browser cannot send
an `Authorization` header when following a link, so `/inspect/login` takes an API key once and
keeps it in an HttpOnly, SameSite=Strict cookie scoped to `/inspect`; each request hands that
key to the same resolver as a bearer header. Another actor's thread or run is a 404, as in the
API. SameSite does not stop a cross-site POST from *setting* a cookie, so login and logout
refuse a form posted from another site (`cross_site`: `Sec-Fetch-Site`, else `Origin`) with a
403.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import ClientDisconnect

from bounded_agents.core.loop import read_bound
from bounded_agents.core.messages import MAX_SEQ
from bounded_agents.core.ports import (
    RunTrace,
    supports_run_timeline,
)
from bounded_agents.core.report import RunReport
from bounded_agents.core.turn.kept import read_kept
from bounded_agents.errors import AgentError, RunNotFound, ThreadNotFound
from bounded_agents.http.deps import DIGITS_ONLY, canonical_uuid
from bounded_agents.http.errors import public_message, status_for, validation_message
from bounded_agents.http.inspector_views import memory_view, trace_loads, turn_view, with_bars
from bounded_agents.http.route import bounded_body, client_gone

if TYPE_CHECKING:
    from bounded_agents.actors import Actor
    from bounded_agents.module import AgentModule

COOKIE = "agent_inspector_key"
THREADS_PER_PAGE = 25
RUNS_PER_PAGE = 20
LOGIN_BODY_LIMIT = 8 * 1024
"""The sign-in form holds one API key: a body over this is refused (413) unread, before any
key is looked at. It is the one form an anonymous caller can post, so it must not be a way to
make the server read a body of any size."""
STATIC = {"inspector.js": "text/javascript", "inspector.css": "text/css"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
UNAUTHORIZED_HEADERS = {**SECURITY_HEADERS, "WWW-Authenticate": "Bearer"}
"""A 401 says what the API's 401 says: a bearer key is wanted (the page offers the form)."""

MAX_PAGE = MAX_SEQ // THREADS_PER_PAGE
"""The last page number accepted: its offset still fits any database's integer."""
PageQuery = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page of the thread list.")]
BeforeQuery = Annotated[
    int | None,
    DIGITS_ONLY,
    Query(ge=1, le=MAX_SEQ, description="Only turns whose seq is below this."),
]

_templates = Environment(
    loader=PackageLoader("bounded_agents.http", "templates"),
    autoescape=True,  # every value, in every template: never opt a file out by its extension
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


# --- requests ----------------------------------------------------------------------------


def build_inspector_router(module: AgentModule, prefix: str = "/inspect") -> APIRouter:
    """The inspector's routes, closed over `module`, at `prefix` (`build_router(module)` includes
    them at `/inspect`; a host may build and include its own elsewhere)."""
    pages = _Pages(module, prefix)
    router = APIRouter(prefix=prefix, include_in_schema=False, route_class=_route_class(pages))
    router.add_api_route("/", pages.threads, methods=["GET"])
    router.add_api_route("/threads/{thread_id}", pages.thread_page, methods=["GET"])
    router.add_api_route("/threads/{thread_id}/timeline", pages.timeline_fragment, methods=["GET"])
    router.add_api_route("/runs/{run_id}", pages.run_page, methods=["GET"])
    router.add_api_route("/login", pages.login_form, methods=["GET"])
    router.add_api_route("/login", pages.login, methods=["POST"])
    router.add_api_route("/logout", pages.logout, methods=["POST"])
    router.add_api_route("/static/{name}", _static, methods=["GET"])
    return router


def _route_class(pages: _Pages) -> type[APIRoute]:
    class InspectorRoute(APIRoute):
        """A parameter that does not validate (`?page=10**20`) is a page saying so, a 400:
        the inspector answers a browser, and its values never reach the database."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                try:
                    return await handler(request)
                except RequestValidationError as exc:
                    message = validation_message(exc)
                    return pages.render(
                        request, "error.html", 400, status=400, message=message, actor=None
                    )

            return guarded

    return InspectorRoute


class _Pages:
    """The inspector's handlers over one module, at one prefix."""

    def __init__(self, module: AgentModule, prefix: str) -> None:
        self.module = module
        self.prefix = prefix

    def base(self, request: Request) -> str:
        """Links and the cookie's path: the app's root path, then the prefix."""
        return str(request.scope.get("root_path", "")) + self.prefix

    def render(
        self,
        request: Request,
        template: str,
        http_status: int = 200,
        *,
        unauthorized: bool = False,
        **values: Any,
    ) -> HTMLResponse:
        """`signs_out`: whether the header offers to log out. In local mode (no API keys)
        every request is actor `local` whatever it sends, so there is nothing to sign out of."""
        html = _templates.get_template(template).render(
            base=self.base(request), signs_out=not self.module.local_mode, **values
        )
        headers = UNAUTHORIZED_HEADERS if unauthorized else SECURITY_HEADERS
        return HTMLResponse(html, status_code=http_status, headers=headers)

    async def actor_or_login(self, request: Request) -> Actor | HTMLResponse:
        actor = await _actor(self.module, request)
        if actor is None:
            return self.render(
                request, "login.html", 401, failed=False, actor=None, unauthorized=True
            )
        return actor

    def failure(self, request: Request, actor: Actor, error: AgentError) -> HTMLResponse:
        status = status_for(error)
        message = public_message(error.code, str(error))
        return self.render(
            request, "error.html", status, status=status, message=message, actor=actor
        )

    async def threads(self, request: Request, page: PageQuery = 1) -> Response:
        actor = await self.actor_or_login(request)
        if isinstance(actor, HTMLResponse):
            return actor
        store = self.module.store
        offset = (page - 1) * THREADS_PER_PAGE
        listing = await store.list_threads(actor.id, limit=THREADS_PER_PAGE + 1, offset=offset)
        return self.render(
            request,
            "threads.html",
            actor=actor,
            threads=listing[:THREADS_PER_PAGE],
            page_no=page,
            more=len(listing) > THREADS_PER_PAGE,
        )

    async def timeline_values(
        self, actor: Actor, thread_id: str, before: int | None
    ) -> dict[str, Any]:
        canonical = canonical_uuid(thread_id)
        if canonical is None:
            raise ThreadNotFound(thread_id)
        loop = self.module.loop
        thread = await loop.owned_thread(canonical, actor.id)
        bound = read_bound(loop.definition(thread.agent).policy)
        runtime = loop.runtime
        traces: list[RunTrace] = []
        if supports_run_timeline(runtime):
            traces = await runtime.thread_runs(
                canonical, limit=RUNS_PER_PAGE + 1, before_seq=before
            )
        more = len(traces) > RUNS_PER_PAGE
        traces = traces[:RUNS_PER_PAGE]
        stored = await read_kept(self.module.store, canonical, trace_loads(traces))
        turns = with_bars([turn_view(t, stored) for t in traces], bound.tokens if bound else None)
        return {
            "thread": thread,
            "turns": turns,
            "bound": bound,
            "timeline": supports_run_timeline(runtime),
            "older": traces[-1].seq if more and traces else None,
            "before": before,
            "live": before is None,
            "running": any(t.status == "running" for t in turns),
        }

    async def thread_page(
        self, request: Request, thread_id: str, before: BeforeQuery = None
    ) -> Response:
        actor = await self.actor_or_login(request)
        if isinstance(actor, HTMLResponse):
            return actor
        try:
            values = await self.timeline_values(actor, thread_id, before)
            thread = values["thread"]
            preview = await self.module.loop.preview(thread.id, actor.id, thread)
            memory = await memory_view(self.module.store, preview)
        except AgentError as exc:
            return self.failure(request, actor, exc)
        return self.render(
            request, "thread.html", actor=actor, preview=preview, memory=memory, **values
        )

    async def timeline_fragment(
        self, request: Request, thread_id: str, before: BeforeQuery = None
    ) -> Response:
        actor = await _actor(self.module, request)
        if actor is None:
            return Response(status_code=401, headers=UNAUTHORIZED_HEADERS)
        try:
            values = await self.timeline_values(actor, thread_id, before)
        except AgentError as exc:
            return Response(status_code=status_for(exc), headers=SECURITY_HEADERS)
        return self.render(request, "_timeline.html", **values)

    async def run_page(self, request: Request, run_id: str) -> Response:
        actor = await self.actor_or_login(request)
        if isinstance(actor, HTMLResponse):
            return actor
        canonical = canonical_uuid(run_id)
        record = await self.module.loop.runtime.get_run(canonical) if canonical else None
        if record is None or record.request.actor_id != actor.id:
            return self.failure(request, actor, RunNotFound(run_id))
        report = (
            RunReport.model_validate(record.report)
            if record.report is not None
            else RunReport(run_id=record.request.run_id)
        )
        error = None
        if record.error_code is not None:
            error = public_message(record.error_code, record.error_message or "")
        return self.render(
            request,
            "run.html",
            actor=actor,
            record=record,
            report=report,
            purposes=_purposes(report),
            error=error,
        )

    async def login_form(self, request: Request) -> Response:
        return self.render(request, "login.html", failed=False, actor=None)

    def refused_cross_site(self, request: Request) -> HTMLResponse | None:
        if not cross_site(request):
            return None
        message = "a form posted from another site is refused: sign in on this page"
        return self.render(request, "error.html", 403, status=403, message=message, actor=None)

    async def login(self, request: Request) -> Response:
        refused = self.refused_cross_site(request)
        if refused is not None:
            return refused
        try:
            body = await (await bounded_body(request, LOGIN_BODY_LIMIT, LOGIN_BODY_LIMIT)).body()
        except ClientDisconnect:  # a dropped sign-in is the client's, as on the API routes
            return client_gone(request)
        except AgentError as exc:  # too large, or a Content-Length that is no number
            status = status_for(exc)
            message = "the sign-in form is too large" if status == 413 else str(exc)
            return self.render(
                request, "error.html", status, status=status, message=message, actor=None
            )
        form = parse_qs(body.decode("utf-8", "replace"))
        key = (form.get("key") or [""])[0].strip()
        actor = await self.module.actor_resolver(_with_key(request, key)) if key else None
        if actor is None:
            return self.render(
                request, "login.html", 401, failed=True, actor=None, unauthorized=True
            )
        response = RedirectResponse(self.base(request) + "/", status_code=303)
        response.set_cookie(
            COOKIE,
            key,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path=self.base(request),
        )
        return response

    async def logout(self, request: Request) -> Response:
        refused = self.refused_cross_site(request)
        if refused is not None:
            return refused
        response = RedirectResponse(self.base(request) + "/login", status_code=303)
        response.delete_cookie(COOKIE, path=self.base(request))
        return response


def _purposes(report: RunReport) -> dict[str, list[int]]:
    """Per purpose: [calls, prompt tokens, completion tokens]."""
    purposes: dict[str, list[int]] = {}
    for call in report.model_calls:
        row = purposes.setdefault(call.purpose, [0, 0, 0])
        row[0] += 1
        row[1] += call.prompt_tokens
        row[2] += call.completion_tokens
    return purposes


async def _static(name: str) -> Response:
    media = STATIC.get(name)
    if media is None:
        return Response(status_code=404)
    body = (importlib.resources.files("bounded_agents.http") / "static" / name).read_bytes()
    return Response(
        body,
        media_type=media,
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "max-age=300"},
    )


def cross_site(request: Request) -> bool:
    """Whether a form POST came from another site's page: login CSRF, which signs the victim
    in as the attacker (whose threads then collect what the victim types), or logs them out.

    `Sec-Fetch-Site` decides when sent (a page cannot forge it): only `same-origin`, and
    `none` (the user's own action), pass. Else `Origin` must name this host (a browser sends
    it with every cross-site POST, and `null` from a sandboxed or redirected context is
    refused). A request with neither is no browser's (curl, a script): it passes as it
    always did, since login CSRF needs a browser to carry the cookie."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site.lower() not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    host = request.headers.get("host", "")
    return origin == "null" or urlsplit(origin).netloc.lower() != host.lower()


async def _actor(module: AgentModule, request: Request) -> Actor | None:
    """The module's resolver on the request as sent, else on the key the login cookie holds."""
    actor = await module.actor_resolver(request)
    key = request.cookies.get(COOKIE)
    if actor is None and key:
        actor = await module.actor_resolver(_with_key(request, key))
    return actor


def _with_key(request: Request, key: str) -> Request:
    headers = [(k, v) for k, v in request.scope["headers"] if k != b"authorization"]
    headers.append((b"authorization", f"Bearer {key}".encode("latin-1", "replace")))
    return Request({**request.scope, "headers": headers})


__all__ = ["LOGIN_BODY_LIMIT", "build_inspector_router", "turn_view", "with_bars"]
