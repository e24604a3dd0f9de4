"""Traces and metrics of runs, outside `core/`: the loop stays free of any telemetry library."""

from bounded_agents.observability.attributes import model_names
from bounded_agents.observability.metrics import TurnMetrics
from bounded_agents.observability.runtime import ObservedRuntime

__all__ = ["ObservedRuntime", "TurnMetrics", "model_names"]
