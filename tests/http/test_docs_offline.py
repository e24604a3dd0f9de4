"""`/docs` and `/redoc` work without internet: every asset they load comes from this server."""

from __future__ import annotations

import re
from contextlib import AsyncExitStack
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from app.main import create_app
from tests.http.conftest import http_settings, open_client

_REFERENCE = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|url:\s*'([^']+)'""")
_HOST = re.compile(r"https?:|[\"'(=]\s*//")
"""An absolute or protocol-relative URL."""
_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "json"}


@pytest.fixture
async def client(stack: AsyncExitStack, tmp_path: Path) -> httpx.AsyncClient:
    settings = http_settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'docs.db'}", migrate_on_start=True
    )
    return await open_client(stack, create_app(settings))


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_load_every_asset_from_this_server(
    client: httpx.AsyncClient, page: str
) -> None:
    html = await client.get(page)
    assert html.status_code == 200
    assert not _HOST.search(html.text), "the page names another host"
    references = [a or b for a, b in _REFERENCE.findall(html.text)]
    assert "/openapi.json" in references
    assert len(references) >= 3  # the script, the spec, the icon (and Swagger UI's stylesheet)
    for reference in references:
        parts = urlsplit(reference)
        assert not parts.scheme and not parts.netloc, reference
        asset = await client.get(reference)
        assert asset.status_code == 200, reference
        suffix = Path(parts.path).suffix
        # The bundles are real (a page script is hundreds of KB); an icon may be a few hundred
        # bytes (fastapi-offline 1.7's favicon is 412), but never empty.
        assert len(asset.content) > (1000 if suffix in (".js", ".css", ".json") else 100), reference
        assert _TYPES[suffix] in asset.headers["content-type"], reference


async def test_swagger_ui_fetches_no_validator_badge(client: httpx.AsyncClient) -> None:
    assert '"validatorUrl": null' in (await client.get("/docs")).text
