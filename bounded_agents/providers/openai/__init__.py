"""The OpenAI-compatible chat completions provider (OpenAI, Ollama, vLLM, llama.cpp), one
concern a module:

    compat.py     `OpenAICompatibleProvider`: the HTTP calls and the retries
    wire.py       the request body: messages and tools in OpenAI's wire shapes
    response.py   reading an unstreamed answer: content, tool calls, usage, finish reason
    stream.py     folding a streamed answer's `data:` lines into deltas and one answer
    failures.py   which failures are retried, what an error body says, a 429's wait
"""

from __future__ import annotations

from bounded_agents.providers.openai.compat import OpenAICompatibleProvider

__all__ = ["OpenAICompatibleProvider"]
