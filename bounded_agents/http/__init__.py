"""The FastAPI edge: routes, request/response schemas, SSE, and the one error mapping.

    app = FastAPI(lifespan=module.lifespan)
    app.include_router(build_router(module))             # the native API (docs/http-api.md)
    app.include_router(build_openai_router(module))      # optional: /v1 (docs/openai-api.md)

The application builds the routes from the module; the module (`bounded_agents.module`) imports
nothing of this package. The OpenAI-compatible `/v1` API is the subpackage
`bounded_agents.http.openai`. Names are loaded on first use, so importing one module of the
package (`bounded_agents.http.errors`) does not import every route.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bounded_agents.http.errors import install_error_handlers
    from bounded_agents.http.openai import build_openai_router
    from bounded_agents.http.router import build_router

__all__ = ["build_openai_router", "build_router", "install_error_handlers"]

_WHERE = {
    "build_router": "bounded_agents.http.router",
    "build_openai_router": "bounded_agents.http.openai.api",
    "install_error_handlers": "bounded_agents.http.errors",
}


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(import_module(_WHERE[name]), name)
    globals()[name] = found
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
