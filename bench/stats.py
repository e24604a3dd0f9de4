"""Timing helpers: perf_counter samples, median and p95, and how many reps a budget allows."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

Stat = dict[str, Any]
"""{"median_ms", "p95_ms", "min_ms", "n"}: one measured figure."""


def summarize(samples_s: list[float]) -> Stat:
    """Median, p95 (nearest rank) and min of `samples_s` (seconds), reported in milliseconds."""
    if not samples_s:
        raise ValueError("no samples")
    ordered = sorted(samples_s)
    rank = max(1, math.ceil(0.95 * len(ordered)))
    return {
        "median_ms": statistics.median(ordered) * 1e3,
        "p95_ms": ordered[rank - 1] * 1e3,
        "min_ms": ordered[0] * 1e3,
        "n": len(ordered),
    }


async def time_async(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    """Seconds `fn()` took (perf_counter) and what it returned."""
    start = time.perf_counter()
    value = await fn()
    return time.perf_counter() - start, value


async def sample(fn: Callable[[], Awaitable[Any]], *, reps: int, warmup: int = 1) -> list[float]:
    """`warmup` unmeasured calls, then `reps` timed ones."""
    for _ in range(warmup):
        await fn()
    gc.collect()
    out: list[float] = []
    for _ in range(reps):
        seconds, _value = await time_async(fn)
        out.append(seconds)
    return out


def reps_within(one_s: float, wanted: int, budget_s: float, minimum: int) -> int:
    """Reps to take when one costs about `one_s`: `wanted`, fewer if `budget_s` runs out, never
    fewer than `minimum` (unless fewer are wanted)."""
    if one_s <= 0:
        return wanted
    return max(min(minimum, wanted), min(wanted, int(budget_s / one_s)))


def ratio(a: float, b: float) -> float:
    return a / b if b else math.inf
