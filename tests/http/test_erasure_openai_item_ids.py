"""`DELETE /v1/conversations/{id}/items/{item_id}` with the largest seq an item id may name
(`MAX_SEQ`, 2**31 - 1) is a 404 on every database. Found by attack: the read below `seq + 1`
overflowed PostgreSQL's `integer`, a 503 `store_error` that the `openai` SDK retried twice
before raising `InternalServerError`; SQLite answered 404."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from tests.http.conftest import ALICE, ModuleFactory, open_client
from tests.http.test_openai_sdk import openai_app


@pytest.mark.parametrize("item_id", ["msg_2147483647", "fc_2147483647_0", "fco_2147483647_0"])
async def test_deleting_an_item_id_at_the_largest_seq_is_a_404_not_a_503(
    stack: AsyncExitStack, make_module: ModuleFactory, item_id: str
) -> None:
    client = await open_client(stack, openai_app(make_module()))
    conversation = (await client.post("/v1/conversations", headers=ALICE, json={})).json()["id"]
    turn = await client.post(
        "/v1/responses", headers=ALICE, json={"conversation": conversation, "input": "hello"}
    )
    assert turn.status_code == 200, turn.text

    r = await client.delete(f"/v1/conversations/{conversation}/items/{item_id}", headers=ALICE)

    assert r.status_code == 404, r.text
    assert r.json()["error"]["code"] == "item_not_found", r.text
    items = await client.get(f"/v1/conversations/{conversation}/items", headers=ALICE)
    assert [i["id"] for i in items.json()["data"]] == ["msg_2", "msg_1"]
