"""Traces and metrics of runs, outside `core/`: the loop stays free of any telemetry library."""

from app.observability.metrics import TurnMetrics
from app.observability.runtime import ObservedRuntime, model_names

__all__ = ["ObservedRuntime", "TurnMetrics", "model_names"]
