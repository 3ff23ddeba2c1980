"""The capture format's JSON Schema, generated from its types (``records.py``, ``format.py``) and
checked in beside them (``capture-1.schema.json``, the version being the format's): the extension's
TypeScript types are generated from that file, and a test fails when the types change without it.

    python -m xla_lab.capture.schema          # rewrite the checked-in schema from the types
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from .records import SCHEMA, CellCapture, GraphArtifacts

PATH = Path(__file__).with_name(f"capture-{SCHEMA.rsplit('/', 1)[1]}.schema.json")


def capture_schema() -> dict:
    """A saved capture: the cell's record (``CellCapture``) and, under ``artifacts``, each graph it ran
    once (``GraphArtifacts`` by graph hash; steps name theirs by hash)."""
    (_, defs) = TypeAdapter.json_schemas(
        [("capture", "validation", TypeAdapter(CellCapture)),
         ("graph", "validation", TypeAdapter(GraphArtifacts))],
        ref_template="#/$defs/{model}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://xla-lab.invalid/{SCHEMA}",
        "title": "CaptureDocument",
        "description": f"An xla_lab capture ({SCHEMA}): one run of a %%xla cell, as notebooks save it.",
        "allOf": [{"$ref": "#/$defs/CellCapture"}],
        "type": "object",
        "properties": {
            "schema": {"const": SCHEMA},
            "artifacts": {"type": "object", "additionalProperties": {"$ref": "#/$defs/GraphArtifacts"}},
        },
        "required": ["schema"],
        "$defs": defs["$defs"],
    }


def text() -> str:
    return json.dumps(capture_schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    PATH.write_text(text())
    print(f"wrote {PATH}")
