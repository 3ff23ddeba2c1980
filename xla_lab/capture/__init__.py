"""Capture: one run of a ``%%xla`` cell -> ``CellCapture`` (data only; views render it)."""

from .records import SCHEMA, CaptureFormatError, CellCapture, GraphArtifacts, StepRecord

__all__ = ["SCHEMA", "CaptureFormatError", "CellCapture", "GraphArtifacts", "StepRecord"]
