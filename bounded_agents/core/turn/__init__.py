"""The turn: two values and one function per phase (docs/architecture.md, "The turn").

`TurnDeps` (`deps.py`) holds what every run may use, frozen; `Turn` (`state.py`) holds one
attempt's state. Each phase is a module function taking `(deps, turn, ...)`: `load.py` (the
user's message and the bounded read), `fold.py` with `fold_chunk.py` and `fold_calls.py` (the
rolling summary), `answer.py` (model and tool steps), `finish.py` (the answer and the run's
end), `preview.py` (`GET .../window`), `replay.py` (journals of the legacy path). `prompt.py`
is the one prompt builder; `spend.py` holds quota and ledger rows; `store.py` and `ledger.py`
lift any store and ledger to what a turn needs. `bounded_agents.core.loop.AgentLoop` builds
the values and composes the phases. (`TurnDeps` is imported from `deps.py` itself: this package
is imported by the history search tool, which the tool budget in the deps imports.)
"""

from bounded_agents.core.turn.public import (
    AgentDefinition,
    EventSink,
    FoldPreview,
    LoopEvent,
    StartSink,
    ToolBinding,
    ToolCallEvent,
    ToolContext,
    ToolResultEvent,
    TurnAwareTool,
    WindowPreview,
)
from bounded_agents.core.turn.state import Digest, Turn, Window

__all__ = [
    "AgentDefinition",
    "Digest",
    "EventSink",
    "FoldPreview",
    "LoopEvent",
    "StartSink",
    "ToolBinding",
    "ToolCallEvent",
    "ToolContext",
    "ToolResultEvent",
    "Turn",
    "TurnAwareTool",
    "Window",
    "WindowPreview",
]
