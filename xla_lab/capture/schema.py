"""The capture format's JSON Schema, generated from its types (``records.py``, ``format.py``) and
checked in beside them (``capture-1.schema.json``, the version being the format's): the extension's
TypeScript types are generated from that file, and a test fails when the types change without it.

    python -m xla_lab.capture.schema          # rewrite the checked-in schema from the types
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from .records import SCHEMA, CellCapture, GraphArtifacts

DIALECT = "http://json-schema.org/draft-07/schema#"
PATH = Path(__file__).with_name(f"capture-{SCHEMA.rsplit('/', 1)[1]}.schema.json")


class TypesOnly(GenerateJsonSchema):
    """No title per field (a field's name says it): the TypeScript generated from the schema then
    writes each field's type in place instead of an alias per field name."""

    def field_title_should_be_set(self, schema) -> bool:
        return False

    def union_schema(self, schema):
        return _merged(super().union_schema(schema))

    def nullable_schema(self, schema):
        return _merged(super().nullable_schema(schema))

    def tuple_schema(self, schema):
        """A fixed-length row as draft 7 writes it (``items`` as a list), the dialect of the schema: the
        TypeScript generator and the browser's validator read that one, not 2020-12's ``prefixItems``."""
        out = super().tuple_schema(schema)
        if "prefixItems" in out:
            out["items"] = out.pop("prefixItems")
        return out


class AsWritten(TypesOnly):
    """A capture as ``to_dict`` writes it (the panel model's ``capture``): every field of a record is
    there, defaults included (a saved one may leave out those with defaults: the loader fills them)."""

    def field_is_required(self, field, total: bool) -> bool:
        return field["type"] == "dataclass-field" or super().field_is_required(field, total)


def _merged(out: dict) -> dict:
    """``anyOf`` of bare types as one ``type`` list (``int | float | None``: number or null): the same
    types, and a validator a tenth the size."""
    choices = out.get("anyOf")
    if not choices or any(set(c) != {"type"} or not isinstance(c["type"], str) for c in choices) or len(out) > 1:
        return out
    types = list(dict.fromkeys(c["type"] for c in choices))
    if "number" in types and "integer" in types:
        types.remove("integer")
    return {"type": types[0] if len(types) == 1 else types}


def definitions(*adapters: tuple[str, TypeAdapter], generator: type[TypesOnly] = TypesOnly) -> dict:
    """The ``$defs`` of these types, each named by its class."""
    (_, defs) = TypeAdapter.json_schemas([(key, "validation", a) for key, a in adapters],
                                         ref_template="#/$defs/{model}", schema_generator=generator)
    return defs["$defs"]


def capture_schema(generator: type[TypesOnly] = TypesOnly) -> dict:
    """A saved capture: the cell's record (``CellCapture``) and, under ``artifacts``, each graph it ran
    once (``GraphArtifacts`` by graph hash; steps name theirs by hash). ``AsWritten``: as Python writes
    it (``artifacts`` always there)."""
    defs = definitions(("capture", TypeAdapter(CellCapture)), ("graph", TypeAdapter(GraphArtifacts)),
                       generator=generator)
    return {
        "$schema": DIALECT,
        "$id": f"https://xla-lab.invalid/{SCHEMA}",
        "title": "CaptureDocument",
        "description": f"An xla_lab capture ({SCHEMA}): one run of a %%xla cell, as notebooks save it.",
        "allOf": [{"$ref": "#/$defs/CellCapture"}],
        "type": "object",
        "properties": {
            "schema": {"const": SCHEMA},
            "artifacts": {"type": "object", "additionalProperties": {"$ref": "#/$defs/GraphArtifacts"}},
        },
        "required": ["schema", "artifacts"] if generator is AsWritten else ["schema"],
        "$defs": defs,
    }


def text() -> str:
    return json.dumps(capture_schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    PATH.write_text(text())
    print(f"wrote {PATH}")
