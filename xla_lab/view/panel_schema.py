"""The panel model's JSON Schema (``xla_lab.panel/1``), generated from its types (``panel_format.py``)
and the capture format's (the model's ``capture``), checked in beside them (``panel-1.schema.json``).
The extension generates its TypeScript types and its validator from this file at build time
(``extension/gen-types.mjs``); a test fails when the types change without it.

    python -m xla_lab.view.panel_schema          # rewrite the checked-in schema from the types
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from xla_lab.capture.schema import DIALECT, AsWritten, capture_schema, definitions

from .panel_format import SCHEMA, PanelModel

PATH = Path(__file__).with_name(f"panel-{SCHEMA.rsplit('/', 1)[1]}.schema.json")


def panel_schema() -> dict:
    """The panel model, with the capture format's definitions beside its own (one file: the browser's
    validator is generated from it alone)."""
    capture = capture_schema(AsWritten)
    defs = dict(capture.pop("$defs"))
    for name, schema in definitions(("panel", TypeAdapter(PanelModel)), generator=AsWritten).items():
        if defs.setdefault(name, schema) != schema:
            raise ValueError(f"the capture format and the panel model both define {name!r}, differently")
    defs["CaptureDocument"] = {k: v for k, v in capture.items() if not k.startswith("$")}
    # a notebook keeps a graph's record without its texts and analyses that the model carries elsewhere
    # (``saved_output.saved_payload``): its fields are as a saved capture's, all but the hash optional
    defs["GraphArtifacts"] = capture_schema()["$defs"]["GraphArtifacts"]
    root = defs.pop("PanelModel")
    root["properties"]["schema"] = {"const": SCHEMA}
    root["properties"]["capture"] = {"$ref": "#/$defs/CaptureDocument"}
    return {"$schema": DIALECT, "$id": f"https://xla-lab.invalid/{SCHEMA}",
            **root, "$defs": defs}


def text() -> str:
    return json.dumps(panel_schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    PATH.write_text(text())
    print(f"wrote {PATH}")
