"""What the prompt a search answers from already shows, so a search does not send it again.

`core.search` skips a hit the prompt holds (`Shown.holds`: a message, or a tool text shown
whole), never counts the turn's own question as newer (`Shown.is_question`), and sends as
`shown_above` a row a sibling search of the running step already quotes (`Shown.rows`,
`core.search_results.quoted_rows`). Apart from the search so that the one question, "what
does the model already read?", is answered in one place.
"""

from __future__ import annotations

from collections.abc import Sequence

from bounded_agents.core.messages import ChatMessage
from bounded_agents.core.ports import MARK_END, MARK_START, SearchHit
from bounded_agents.core.search_results import quoted_rows
from bounded_agents.core.search_text import SEARCH_TOOL_NAME, TOOL_TEXT_SEPARATOR, composed


class Shown:
    """What the prompt already shows: its messages (role, content), its tool results' texts,
    the rows the step's earlier search results quote (`quoted_rows`; only when the model is
    sent the prompt as it is), and the turn's own question (its last user message)."""

    def __init__(self, prompt: Sequence[ChatMessage], sent_as_is: bool) -> None:
        self.messages = {(m.role, m.content) for m in prompt if m.role != "tool"}
        self.tools = [composed(m.content) for m in prompt if m.role == "tool"]
        self.rows = quoted_rows(sibling_results(prompt)) if sent_as_is else set()
        users = [m.content for m in prompt if m.role == "user"]
        self.question = users[-1] if users else None

    def holds(self, hit: SearchHit) -> bool:
        if hit.from_seq is not None or (hit.role, hit.content) not in self.messages:
            return False
        if not hit.in_tools:
            return True
        # Composed on both sides (the fallback marks composed text; found by attack, a shown
        # result written NFD came back), and whole results, not parts split at a blank line
        # (one holding a blank line always came back) nor substrings (found by review: an old
        # result "4411" inside a shown "order 44110 shipped" was hidden).
        text = composed(hit.marked.replace(MARK_START, "").replace(MARK_END, ""))
        return joined_from(text, self.tools)

    def is_question(self, hit: SearchHit) -> bool:
        return hit.role == "user" and hit.from_seq is None and hit.content == self.question


def sibling_results(prompt: Sequence[ChatMessage]) -> list[str]:
    """The texts of the `search_history` results already in, answering calls of the step that
    is running (the prompt's last assistant message; its call ids are distinct in the run).
    The step's own calls are the set known to reach the next call whole: an earlier turn's
    result in the kept history may be refolded or cleared first, and a call id may repeat
    across turns (a local server numbers calls per response), so another tool's output could
    answer to it (found by attack)."""
    asking = next((i for i in range(len(prompt) - 1, -1, -1) if prompt[i].role == "assistant"), -1)
    if asking < 0:
        return []
    ids = {c.id for c in prompt[asking].tool_calls if c.name == SEARCH_TOOL_NAME}
    return [m.content for m in prompt[asking + 1 :] if m.role == "tool" and m.tool_call_id in ids]


def joined_from(text: str, pieces: Sequence[str]) -> bool:
    """Whether `text` is whole `pieces` joined by `TOOL_TEXT_SEPARATOR` (a message's indexed
    tool text, its results but the search tool's own, each shown in the prompt)."""
    starts, seen = [0], {0}
    while starts:
        at = starts.pop()
        for piece in pieces:
            if not text.startswith(piece, at):
                continue
            end = at + len(piece)
            if end == len(text):
                return True
            after = end + len(TOOL_TEXT_SEPARATOR)
            if text.startswith(TOOL_TEXT_SEPARATOR, end) and after not in seen:
                seen.add(after)
                starts.append(after)
    return False


__all__ = ["Shown", "joined_from", "sibling_results"]
