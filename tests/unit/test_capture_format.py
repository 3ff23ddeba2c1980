"""The capture format, defined once by its types (``capture/format.py``, ``capture/records.py``): the
checked-in JSON Schema is what the types give, every recorded capture is valid under it, and no saved
capture, however damaged, crashes a view: a fuzzer mutates every fixture capture thousands of times
(fixed seed) and renders each as text, rich, HTML, the panel's JSON and the static page. Anything but
``CaptureFormatError`` fails, printing the mutation."""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path

import pytest

from xla_lab import CaptureFormatError, CellCapture

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
CASES = sorted(p.stem for p in FIXTURES.glob("*.json") if "capture" in json.loads(p.read_text()))
MUTATIONS = int(os.environ.get("XLA_LAB_FUZZ_MUTATIONS", "5200"))  # over all fixtures, per run
SEED = 61


def _fixture(name: str) -> dict:
    data = json.loads((FIXTURES / f"{name}.json").read_text())["capture"]
    return _with_compile_profile(data)


def _with_compile_profile(data: dict) -> dict:
    """Recorded fixtures predate compile profiles: the first graph gets one the real reader made (from
    the hand-made profiler events of test_compile_profile), so the fuzzer reaches that section too."""
    import importlib.util

    from xla_lab.profile.compile_profile import compile_profiles

    spec = importlib.util.spec_from_file_location("_events", Path(__file__).with_name("test_compile_profile.py"))
    events = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(events)
    _planes = events._planes

    graphs = list((data.get("artifacts") or {}).values())
    if graphs:
        (profile,) = compile_profiles(_planes())
        profile["counts"] = {"hlo_before": 3, "hlo_after": 4, "kernels": 2, "functions": 12}
        graphs[0]["compile_profile"] = profile
    return data


def test_the_checked_in_schemas_are_what_the_types_give():
    from xla_lab.capture import schema
    from xla_lab.view import panel_schema

    assert schema.PATH.read_text() == schema.text(), "run: python -m xla_lab.capture.schema"
    assert panel_schema.PATH.read_text() == panel_schema.text(), "run: python -m xla_lab.view.panel_schema"


@pytest.mark.parametrize("name", CASES)
def test_every_panel_model_is_valid_under_the_panel_schema(name):
    """What the browser's validator (generated from the panel schema) accepts is what Python writes."""
    from panel_checks import panel_schema_errors

    from xla_lab.view.panel_model import panel_model

    capture = CellCapture.from_dict(_fixture(name))
    assert not panel_schema_errors(json.loads(json.dumps(panel_model(capture, [capture]))))


@pytest.mark.parametrize("name", CASES)
def test_every_recorded_capture_is_valid_under_the_schema(name):
    import jsonschema

    from xla_lab.capture import schema

    data = _fixture(name)
    jsonschema.Draft7Validator(json.loads(schema.PATH.read_text())).validate(data)
    capture = CellCapture.from_dict(data)
    assert not [n for n in capture.notes if "left out of this saved capture" in n]


def _paths(node, path=()):
    if len(path) > 40:  # (not into a 3,000-deep nest an earlier mutation made)
        return
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield path + (i,)
            yield from _paths(v, path + (i,))


def _deep(levels: int):
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


JUNK = [None, 0, -1, 3.5, True, "", "<img src=x onerror=alert(1)>", [], {}, [1, "x"], {"a": None}, 10**30,
        -10**30, 1e308, "9" * 400, "\u202e\x00</pre><script>x</script>", {"<b>": "<i>"}]


def _mutate(data: dict, rng: random.Random) -> list[tuple]:
    """Up to four mutations of ``data`` in place: a value swapped for junk (types, huge numbers, hostile
    strings, 3,000-deep nesting), a key or item dropped, a list emptied or doubled. Returns them."""
    done = []
    for _ in range(rng.randint(1, 4)):
        paths = list(_paths(data))
        if not paths:
            break
        # half of the picks aim at the graphs' and ranks' nested sections, where the views look deepest
        deep = [p for p in paths if len(p) >= 3 and p[0] in ("artifacts", "ranks", "profile")]
        path = rng.choice(deep if deep and rng.random() < 0.5 else paths)
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        kind = rng.choice(("junk", "junk", "drop", "deep", "double"))
        if kind == "drop":
            del parent[path[-1]]
        elif kind == "deep":
            parent[path[-1]] = _deep(3000)
        elif kind == "double" and isinstance(parent[path[-1]], list):
            parent[path[-1]] = parent[path[-1]] * 2
        else:
            kind = "junk"
            parent[path[-1]] = copy.deepcopy(rng.choice(JUNK))
        done.append((kind, path))
    return done


def _render(capture: CellCapture, others: list[CellCapture], panel_types) -> None:
    """``panel_types``: a pydantic TypeAdapter of the panel model, which each panel JSON must satisfy."""
    from rich.console import Console

    from xla_lab.profile import breakdown
    from xla_lab.view.panel_model import panel_model
    from xla_lab.view.report import Report, to_html, to_text
    from xla_lab.view.static_html import capture_html, report_html

    to_text(capture)
    for page in (to_html(capture), capture_html(capture), report_html([capture])):
        assert "<img src=x" not in page and "<script>x" not in page  # user text is escaped
    panel_types.validate_python(json.loads(json.dumps(panel_model(capture, others))))  # what the browser's types say
    Console(file=open(os.devnull, "w"), width=120).print(Report(capture))
    if capture.profile:
        kernels = breakdown.kernel_times(capture)
        breakdown.line_times(capture, model=True, kernels=kernels)
        breakdown.op_times(capture, kernels)


def test_fuzzed_captures_load_or_are_refused_and_never_crash_a_view():
    from pydantic import TypeAdapter

    from xla_lab.view.panel_format import PanelModel

    panel_types = TypeAdapter(PanelModel)
    rng = random.Random(SEED)
    bases = {name: _fixture(name) for name in CASES}
    texts = {name: json.dumps(data) for name, data in bases.items()}
    loaded = refused = 0
    for i in range(MUTATIONS):
        name = CASES[i % len(CASES)]
        data = json.loads(texts[name])
        mutations = _mutate(data, rng)
        try:
            capture = CellCapture.from_dict(data)
        except CaptureFormatError as exc:
            assert str(exc)
            refused += 1
            continue
        try:
            _render(capture, [capture], panel_types)
        except Exception as exc:  # noqa: BLE001 - the point: name the mutation that crashed
            raise AssertionError(f"mutation {i} of {name}: {mutations} crashed a view: "
                                 f"{type(exc).__name__}: {exc}") from exc
        loaded += 1
    print(f"{MUTATIONS} mutations over {len(CASES)} captures: {loaded} loaded and rendered, {refused} refused")
    assert loaded + refused == MUTATIONS and loaded > MUTATIONS // 4


def test_every_tutorial_output_is_valid_under_the_panel_schema():
    """The tutorials' saved outputs are what JupyterLab's renderer validates (the extension's validator reads
    the same schema; vitest runs it on these outputs too): they must stay readable as the format changes."""
    from panel_checks import panel_schema_errors

    from xla_lab.view.panel import MIME
    from xla_lab.view.saved_output import unpacked_payload

    outputs = 0
    for notebook in sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            for out in cell.get("outputs", []):
                payload = out.get("data", {}).get(MIME)
                if payload is not None:
                    errors = panel_schema_errors(unpacked_payload(payload))
                    assert not errors, (notebook.name, errors[:5])
                    outputs += 1
    assert outputs >= 15
