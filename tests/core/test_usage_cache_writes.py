"""`Usage.cache_write_tokens` in a journaled response: left out while None (a journal written
before the field keeps its bytes, the golden journals with it), kept and read back when said."""

from __future__ import annotations

from bounded_agents.core.ports import ModelResponse, Usage


def test_an_unsaid_cache_write_is_not_in_the_dump_and_a_said_one_round_trips() -> None:
    assert "cache_write_tokens" not in Usage(prompt_tokens=5).model_dump_json()
    said = ModelResponse(content="x", usage=Usage(prompt_tokens=50, cache_write_tokens=40))
    back = ModelResponse.model_validate_json(said.model_dump_json())
    assert back.usage.cache_write_tokens == 40
    assert back == said
