"""What the browser's validator says of a panel model: the checked-in panel schema (the one
``extension/gen-types.mjs`` hands the browser) applied with jsonschema, each place the model breaks it."""

from __future__ import annotations

import functools
import json


@functools.cache
def _validator():
    import jsonschema

    from xla_lab.view import panel_schema

    return jsonschema.Draft7Validator(json.loads(panel_schema.PATH.read_text()))


def panel_schema_errors(model: dict) -> list[str]:
    """``path: message`` for each place ``model`` (as JSON would carry it) breaks the panel schema."""
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:160]}" for e in _validator().iter_errors(model)]
