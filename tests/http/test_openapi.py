"""/openapi.json documents every route with its errors, in the ErrorOut shape.

(`openapi-spec-validator` is not a dependency, so the structure is asserted directly.)
"""

from __future__ import annotations

from typing import Any

import httpx

ERROR_REF = "#/components/schemas/ErrorOut"

EXPECTED: dict[tuple[str, str], set[str]] = {
    ("get", "/agents"): {"401", "500"},
    ("post", "/agents/{agent}/threads"): {"401", "404", "422", "500"},
    ("post", "/agents/{agent}/threads/{thread_id}/messages"): {
        "400",
        "401",
        "404",
        "409",
        "410",
        "413",
        "422",
        "429",
        "500",
        "502",
        "503",
    },
    ("get", "/threads/{thread_id}"): {"401", "404", "500"},
    ("get", "/threads/{thread_id}/messages"): {"401", "404", "422", "500"},
    ("get", "/threads/{thread_id}/window"): {"401", "404", "500"},
    ("get", "/runs/{run_id}"): {"401", "404", "500"},
    ("get", "/healthz"): {"503"},
    ("delete", "/threads/{thread_id}"): {"401", "404", "409", "500"},
    ("delete", "/threads/{thread_id}/messages/{seq}"): {"401", "404", "409", "422", "500"},
}


async def test_openapi_documents_every_route_and_its_errors(client: httpx.AsyncClient) -> None:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    spec: dict[str, Any] = r.json()
    assert spec["openapi"].startswith("3.")
    assert spec["info"]["title"]
    paths = spec["paths"]
    assert {(m, p) for p, ops in paths.items() for m in ops} == set(EXPECTED)
    for (method, path), statuses in EXPECTED.items():
        op = paths[path][method]
        assert op.get("summary"), (method, path)
        responses = op["responses"]
        assert statuses <= set(responses), (method, path, sorted(responses))
        for status in statuses:
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema == {"$ref": ERROR_REF}, (method, path, status, schema)
        success = [s for s in responses if s.startswith("2")]
        assert len(success) == 1, (method, path)
        # no FastAPI-default validation shape is left anywhere
        assert "HTTPValidationError" not in str(responses)

    schemas = spec["components"]["schemas"]
    error = schemas["ErrorOut"]
    assert set(error["required"]) == {"error"}
    assert schemas["ErrorDetail"]["required"] == ["code", "message"]
    assert schemas["PostMessageIn"]["additionalProperties"] is False
    stream = paths["/agents/{agent}/threads/{thread_id}/messages"]["post"]["responses"]["200"]
    assert set(stream["content"]) == {"application/json", "text/event-stream"}
    for path in ("/threads/{thread_id}", "/runs/{run_id}"):
        params = paths[path]["get"]["parameters"]
        assert [p["schema"].get("format") for p in params if p["in"] == "path"] == ["uuid"]
    # every $ref resolves
    refs = _refs(spec)
    assert refs and all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs)


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        for value in node.values():
            found |= _refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node)) if node else set()
    return set()
