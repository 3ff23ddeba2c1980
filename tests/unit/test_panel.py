"""The per-cell panel's parts that need no capture run in a shell (those on real captures are in
tests/kernel/test_panel.py): the saved payload's bounds, the Graphviz message, live compile progress
read from a written log, the static panel without the built front end, panels freed when closed, and
which prompt names a line."""

from xla_lab.capture.records import CellCapture
from xla_lab.capture.xla_logs import CompileWatch
from xla_lab.view import panel as panel_mod
from xla_lab.view.panel import XlaPanel, viz_message
from xla_lab.view.saved_output import saved_payload


def test_saved_payload_keeps_the_entry_computation_and_bounds_the_rest():
    from xla_lab.view.saved_output import SAVED_HLO_CHARS

    def comp(name, n):
        return f"%{name} (p: f32[8]) -> f32[8] {{\n" + "".join(
            f'  %add.{i} = f32[8]{{0}} add(%p, %p), metadata={{op_type="aten__add" source_file="/long/path.py" '
            f'source_line={i}}}\n' for i in range(n)) + "}"

    hlo = "\n\n".join(["HloModule big, entry_computation_layout={()->()}"] + [comp(f"fused_{k}", 400) for k in range(40)]
                       + ["ENTRY %main () -> f32[8] {\n  ROOT %r = f32[8]{0} constant({...})\n}\n"])
    model = {"capture": {"artifacts": {"h": {"hlo_after": hlo, "hlo_before": "HloModule small\n",
                                             "buffer_assignment": "x" * 100, "node_info": {}, "ir_text": "x"}}},
             "graphs": {}}
    saved = saved_payload(model)["capture"]["artifacts"]["h"]
    assert len(saved["hlo_after"]) <= SAVED_HLO_CHARS + 300 < len(hlo)
    assert saved["hlo_after"].startswith("HloModule big") and "ENTRY %main" in saved["hlo_after"]
    assert "computations (fused bodies, reducers) not saved in the notebook" in saved["hlo_after"]
    assert "metadata" not in saved["hlo_after"] and "%fused_0 " in saved["hlo_after"]
    assert saved["hlo_before"] == "HloModule small\n"
    assert not {"buffer_assignment", "node_info", "ir_text"} & set(saved)
    assert model["capture"]["artifacts"]["h"]["hlo_after"] is hlo  # the live model is unchanged


def test_viz_message_replies_with_buffers(monkeypatch, tmp_path):
    module = tmp_path / "viz-standalone.mjs"
    module.write_bytes(b"export default 42;\n")
    monkeypatch.setattr(panel_mod, "VIZ_MODULE", module)
    panel = XlaPanel()
    sent = []
    monkeypatch.setattr(panel, "send", lambda content, buffers=None: sent.append((content, buffers)))
    panel._on_custom_msg(panel, {"kind": "need-viz"}, [])
    panel._on_custom_msg(panel, {"kind": "something-else"}, [])
    assert sent == [({"kind": "viz"}, [b"export default 42;\n"])]
    monkeypatch.setattr(panel_mod, "VIZ_MODULE", tmp_path / "missing.mjs")
    content, buffers = viz_message()
    assert content["kind"] == "viz" and "missing" in content["error"] and buffers == []
    panel.close()


def test_compile_watch_on_a_written_log(tmp_path):
    log = tmp_path / "sync.log"
    log.write_text("")
    clock = iter(range(100, 200))
    watch = CompileWatch(log, clock=lambda: next(clock))
    assert watch.poll() is None

    def block(kind, graph_hash, name="g"):
        head = f"{kind}: " + "=" * 20
        return (f"{head}\n{kind}: Graph Info: \n{kind}:   Graph Name: {name}\n{kind}:   Graph Hash: {graph_hash}\n"
                f"{kind}: Python Frame Triggered Execution: \n{kind}:   sync (x.py:1)\n{head}\n\n")

    with open(log, "a") as f:
        f.write(block("Execution Analysis", "aaa"))
    assert watch.poll() is None
    with open(log, "a") as f:
        text = block("Compilation Analysis", "bbb", "train")
        f.write(text[:30])  # half a line: nothing yet
        f.flush()
        assert watch.poll() is None
        f.write(text[30:])
    now = watch.poll()
    assert now is not None and (now.graph_hash, now.graph_name, now.step) == ("bbb", "train", 1)
    assert watch.poll() is now  # nothing new written
    with open(log, "a") as f:
        f.write("Post Compilation Analysis: " + "=" * 20 + "\n" + block("Execution Analysis", "bbb"))
    assert watch.poll() is None and [c.graph_hash for c, _ in watch.finished] == ["bbb"]
    log.write_text("")  # truncated by the recorder: starts over
    assert watch.poll() is None
    assert CompileWatch(None).poll() is None


def test_without_the_built_front_end_the_static_panel_is_shown():
    """(static/panel.js is built by npm; a checkout without node still shows the capture.)"""
    import subprocess
    import sys

    code = """
import pathlib
real = pathlib.Path.is_file
pathlib.Path.is_file = lambda self: False if self.name in ("panel.js", "panel.css") else real(self)
from xla_lab.view import panel
from xla_lab.capture.records import CellCapture
assert not panel.FRONTEND_BUILT and "make env" in panel.XlaPanel()._esm
view = panel.panel_for(CellCapture(cell_id="c", execution_count=3, source="x = 1", started_at=0.0, notes=["<b>"]))
bundle = view._repr_mimebundle_()
assert set(bundle) == {"application/vnd.xla-lab.capture+json", "text/plain", "text/html"}, set(bundle)
assert "&lt;b&gt;" in bundle["text/html"] and "<b>" not in bundle["text/html"].replace("<b>xla_lab", "")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_panels_are_freed_when_closed_and_make_no_class_each():
    """Found: anywidget connected a callback holding each widget for a file ``_esm`` (so no panel was
    ever freed), and added its traits per instance (a new class per panel)."""
    import gc
    import weakref

    panel = XlaPanel(CellCapture(cell_id="c", execution_count=1, source="x = 1", started_at=0.0))
    assert type(panel) is XlaPanel and len(panel._esm) > 100
    ref = weakref.ref(panel)
    panel.close()
    del panel
    gc.collect()
    assert ref() is None


def test_cell_prompts_name_a_line_by_the_newest_run_of_its_cell():
    """Pure: runs of one notebook cell (by cell id, else by the same text) share a line's reference when
    the newest run still has that code at that line (numbered as Python numbered it: leading blank
    lines dropped, a cell magic's body after its %% line)."""
    from xla_lab.capture import prompts as prompts_mod

    p = prompts_mod.CellPrompts()
    p.ran(2, "m", "\n\nimport torch\nclass M:\n    def f(self):\n        return 1\n")
    p.ran(3, "t", "%%xla\nm.f()\n")
    p.ran(7, "m", "\nimport torch\nclass M:\n    def f(self):\n        return 1\n")
    p.ran(8, "t", "%%xla\nm.f()\n")
    assert p.current(2, 4, "return 1") == 7 and p.current(3, 1, "m.f()") == 8
    assert p.current(2, 3, "return 1") == 2  # not that line any more
    assert p.current(7, 4, "return 1") == 7 and p.current(99, 1, "x") == 99 and p.current(2, 4, None) == 7
    p.ran(9, None, "y = 1")
    p.ran(12, None, "y = 1")  # no cell ids (a terminal): the same text is the same cell
    assert p.current(9, 1, "y = 1") == 12
    p.ran(None, "m", "ignored")  # a silent execution has no prompt
    small = prompts_mod.CellPrompts()
    old, prompts_mod.MAX_KEPT = prompts_mod.MAX_KEPT, 2
    try:
        for n in range(1, 5):
            small.ran(n, "c", "x = 1")
        assert sorted(small._runs) == [3, 4] and small.current(1, 1, "x = 1") == 1
    finally:
        prompts_mod.MAX_KEPT = old
