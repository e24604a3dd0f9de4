"""The bounded SQL history under the agents people already write: adapters for the OpenAI
Agents SDK (`openai_agents.BoundedSession`), Pydantic AI (`pydantic_ai.BoundedMessageStore`)
and LangChain (`langchain.BoundedChatMessageHistory`).

Each adapter module imports its framework and holds only that framework's shapes; the shared
core (`thread`: the bounded view, items to and from the store's messages, erasure, folding)
imports none. This package's `__init__` imports no adapter, so `import
bounded_agents.integrations` works on the plain install: import the adapter you use, after
`pip install "bounded-agents[openai-agents]"` (or `[pydantic-ai]`, `[langchain]`).
"""

from __future__ import annotations

from bounded_agents.integrations.folds import FoldOutcome
from bounded_agents.integrations.items import ITEM_MEDIA_TYPE, Projection, thread_id_for
from bounded_agents.integrations.thread import (
    DEFAULT_FOLD_ITEMS,
    DEFAULT_KEEP_RUNS,
    BoundedView,
    Entry,
    ThreadHistory,
)

__all__ = [
    "DEFAULT_FOLD_ITEMS",
    "DEFAULT_KEEP_RUNS",
    "ITEM_MEDIA_TYPE",
    "BoundedView",
    "Entry",
    "FoldOutcome",
    "Projection",
    "ThreadHistory",
    "thread_id_for",
]
