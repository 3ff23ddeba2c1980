"""The pure parts of %xla fit: budgets people write, the search on known peak curves (affine ones
answer in four compiles; padded, stepped and quadratic ones still end on a compiled size that fits
next to one that does not), and the views (picture, escaping of the user's text)."""

from __future__ import annotations

import math

import pytest

from xla_lab.precompile.budget import GiB, parse_budget
from xla_lab.precompile.fit_search import FitSearch, Point
from xla_lab.view.fit_view import picture_svg, to_html, to_text


@pytest.mark.parametrize("text, expected", [
    ("16GiB", 16 * GiB), ("16 GiB", 16 * GiB), ("16GB", 16 * 10**9), ("512MiB", 512 << 20),
    ("1.5e9", 1_500_000_000), (1 << 30, 1 << 30), ("v5e", 16 * GiB), ("TPU v4", 32 * GiB),
    ("v5p", 95 * GiB), ("v6e", 32 * GiB), ("A100", 40 * GiB), ("A100-80GB", 80 * GiB), ("H100", 80 * GiB),
    ("L4", 24 * GiB), ("T4", 16 * GiB)])
def test_budgets(text, expected):
    assert parse_budget(text).bytes == expected


@pytest.mark.parametrize("text", ["0", 0, "lots", "-3GiB", "16 parsecs", "", float("nan"), True])
def test_bad_budgets_say_what_is_accepted(text):
    with pytest.raises(ValueError) as info:
        parse_budget(text)
    assert "\n" not in str(info.value)


def run(curve, budget, base=8, multiple=1, max_size=None, grows=None):
    """The search on a curve of peaks; ``grows(size)``: the temporaries' bytes of each compile's
    buffer assignment (None: points without a breakdown)."""
    search = FitSearch(budget, base, multiple, max_size)
    while (nxt := search.next()) is not None:
        size, role = nxt
        search.add(Point(size, int(curve(size)), role, grows=None if grows is None else int(grows(size))))
    return search


def truth(curve, budget, multiple=1, limit=10**7):
    """The largest size within the budget, by walking (curves here are increasing)."""
    lo, hi = 0, limit
    while hi - lo > multiple:
        mid = (lo + hi) // 2 // multiple * multiple
        lo, hi = (mid, hi) if curve(mid) <= budget else (lo, mid)
    return lo


@pytest.mark.parametrize("a, b, budget", [(10 << 20, 3 << 20, 1 << 30), (1 << 30, 1 << 10, 2 << 30),
                                          (0, 4096, 64 << 20), (500, 7, 10_000)])
def test_an_affine_peak_is_answered_in_four_compiles(a, b, budget):
    search = run(lambda s: a + b * s, budget)
    assert search.state == "done"
    assert search.answer.size == truth(lambda s: a + b * s, budget)
    assert search.compiles <= 4
    assert abs(search.prediction_error) < 1e-3


@pytest.mark.parametrize("curve", [
    lambda s: 1_000_000 + 4096 * math.ceil(s / 8) * 8,  # padded to tiles of 8
    lambda s: 2_000_000 + 3000 * s + (500_000 if s > 300 else 0),  # a change of algorithm past 300
    lambda s: 100_000 + 50 * s + 2 * s * s,  # attention: quadratic in the sequence
    lambda s: 400_000 + (s * 4096 if s > 100 else 1000 * s),  # small sizes are not proportional yet
])
def test_other_curves_end_on_a_compiled_bracket(curve):
    budget = 8 << 20
    search = run(curve, budget)
    assert search.state == "done"
    answer = search.answer
    assert answer.peak <= budget < search.at(answer.size + 1).peak
    assert answer.size == truth(curve, budget)


def test_multiples_max_and_nothing_fits():
    curve = lambda s: 1000 + 100 * s  # noqa: E731
    search = run(curve, 100_000, base=8, multiple=8)
    assert search.answer.size % 8 == 0 and search.at(search.answer.size + 8).peak > 100_000
    capped = run(curve, 100_000, base=8, max_size=64)
    assert capped.state == "done" and capped.answer.size == 64
    none = run(curve, 500, base=8)
    assert none.state == "nothing fits" and none.answer is None
    flat = run(lambda s: 5000, 100_000)
    assert flat.state == "no limit"


def result_dict(name="step<script>alert(1)</script>"):
    search = run(lambda s: 1000 + 100 * s, 10_000)
    from xla_lab.precompile.budget import Budget
    from xla_lab.precompile.fit import FitResult

    r = FitResult(name, {"x": 0}, 8, Budget(10_000, "9.77 KiB"), search=search, state=search.state)
    r.buffers = [{"bytes": 4000, "kind": "temp", "shape": "f32[8,<b>]", "instruction": "fusion",
                  "source": {"cell": 3, "line": 2, "code": "y = f(x) <img src=x onerror=alert(1)>"}}]
    r.notes = ["<i>note</i>"]
    return r.to_dict()


def test_views_show_the_answer_the_picture_and_escape_the_users_text():
    d = result_dict()
    text = to_text(d)
    assert f"largest x[0] within 9.77 KiB: {d['answer']['size']}" in text
    assert "[3]:2" in text
    html = to_html(d)
    assert "<script>" not in html and "<img" not in html and "<i>note" not in html and "<b>]" not in html
    assert "&lt;script&gt;" in html
    svg = picture_svg(d)
    assert svg.count("fit-point") == len(d["points"]) and "fit-line" in svg and "budget" in svg


def test_rich_table_renders():
    from rich.console import Console

    console = Console(record=True, width=120)
    from xla_lab.view.fit_view import to_rich

    console.print(to_rich(result_dict("step")))
    out = console.export_text()
    assert "peak against x[0]" in out and "next size up" in out


def test_a_large_fixed_part_gets_a_third_probe_near_the_budget():
    """ResNet-18's train step on the CPU client (points measured by compiling it): its weights,
    gradients and momentum are most of the peak at 4 images, so the second probe lands at 7 and the
    line through 4 and 7 (0.48 MiB per image; 0.58 further out) would be 9% off at the answer. The
    third probe, where that line reaches the budget, puts the line near the answer."""
    curve = lambda s: 181_025_506 + 483_336 * min(s - 4, 3) + 582_000 * max(s - 7, 0)  # noqa: E731
    budget = 320 << 20
    search = run(curve, budget, base=4)
    assert [p.role for p in search.points][:3] == ["probe", "probe", "probe"]
    assert search.state == "done" and search.answer.size == truth(curve, budget)
    assert abs(search.prediction_error) < 0.01
    assert search.compiles <= 5


# The zoo's train steps on the CPU client, as compiled (tests/kernel/test_fit.py's steps; sizes 4-140
# and 2-175 compiled one by one): (peak, temporaries) at the base size, and the peak further out.
# decoder-only, AdamW, 16 MiB: 906,636 B at 4 tokens rows of which 476,416 temporaries; then 119,000-
# 120,000 B a row. Its breakdown at 4 puts the budget at 137 rows; the answer is 136.
DECODER = (lambda s: 430_220 + 476_416 * s // 4 if s <= 4 else 906_636 + 119_936 * (s - 4),
           lambda s: 476_416 * s // 4 if s <= 4 else 476_416 + 119_936 * (s - 4))


def test_the_base_breakdown_puts_the_second_probe_near_the_answer():
    """The base's temporaries, grown with the size, put the second probe within a size or two of the
    answer (decoder-only: 137 for 136), not at ``base x budget / peak`` (74): the line through the
    probes then has almost nothing left to extrapolate."""
    curve, grows = DECODER
    budget = 16 << 20
    search = run(curve, budget, base=4, grows=grows)
    assert search.points[1].role == "probe" and abs(search.points[1].size - truth(curve, budget)) <= 2
    assert search.answer.size == truth(curve, budget)
    assert search.compiles <= 4
    assert run(curve, budget, base=4).points[1].size == 4 * budget // curve(4)  # without a breakdown


@pytest.mark.parametrize("budget", range(4_000_000, 4_400_000, 37_000))
def test_a_line_off_by_less_than_a_size_takes_four_compiles(budget):
    """A slightly convex curve (the line through two probes is off by up to a size near the answer)
    at budgets all through a size's width: the confirm is the line's size rounded to the nearest, so
    the answer is it (the size up is over) or the size below it (it is over): four compiles, never
    more, whichever side of the line the curve falls."""
    curve = lambda s: 500_000 + 28_000 * s + 9 * s * s  # noqa: E731
    search = run(curve, budget, base=4, grows=lambda s: 28_000 * s + 9 * s * s)
    assert search.state == "done" and search.answer.size == truth(curve, budget)
    assert search.compiles <= 4, [(p.size, p.role) for p in search.points]


def test_what_grows_leaves_out_a_weight_shaped_copy_of_the_gradients():
    """Buffer breakdowns of the zoo's steps at their base sizes (CPU client, as compiled): ResNet-18
    holds its weight gradients twice (44.3 of 46.8 MB of temporaries are weight-shaped, about its
    44.7 MB of outputs), so only the rest grows; in GPT-2 and the decoder the weight-shaped share is
    no such copy (activations shaped like weights), so all temporaries grow."""
    from xla_lab.precompile.fit import _grows

    resnet = {"temp_bytes": 46_754_920, "growing_temp_bytes": 2_422_597, "output_bytes": 44_728_548}
    gpt2 = {"temp_bytes": 262_468, "growing_temp_bytes": 45_302, "output_bytes": 139_692}
    decoder = {"temp_bytes": 476_416, "growing_temp_bytes": 326_620, "output_bytes": 107_756}
    assert _grows(resnet) == 2_422_597
    assert _grows(gpt2) == 262_468 and _grows(decoder) == 476_416
    assert _grows({"temp_bytes": 1000}) == 1000 and _grows({}) is None


# ResNet-18's train step (SGD momentum, 32x32 images) on the CPU client: peaks as compiled.
RESNET_PEAKS = {4: 181_025_506, 7: 182_475_514, 16: 188_136_258, 64: 216_840_578, 128: 254_061_698,
                192: 290_761_858, 240: 318_680_578, 256: 327_987_842, 262: 331_474_610, 266: 333_801_170,
                268: 334_964_450, 269: 335_546_090, 272: 337_291_010}


def resnet_curve(s):
    """The compiled peaks, straight between them."""
    sizes = sorted(RESNET_PEAKS)
    hi = next(x for x in sizes if x >= s)
    lo = max(x for x in sizes if x <= s)
    if lo == hi:
        return RESNET_PEAKS[lo]
    return RESNET_PEAKS[lo] + (RESNET_PEAKS[hi] - RESNET_PEAKS[lo]) * (s - lo) // (hi - lo)


def test_a_confirm_over_the_budget_is_followed_by_the_size_below():
    """ResNet-18 (its compiled peaks; 320 MiB, answer 268): the base's breakdown (2.4 MB of its
    temporaries grow) puts the second probe at 259, the line through 4 and 259 rounds to 269, which is
    over; 268, the size below, fits: four compiles."""
    budget = 320 << 20
    search = FitSearch(budget, 4)
    search.add(Point(4, resnet_curve(4), "probe", grows=2_422_597))
    while (nxt := search.next()) is not None:
        search.add(Point(nxt[0], resnet_curve(nxt[0]), nxt[1]))
    assert [(p.size, p.role) for p in search.points] == [(4, "probe"), (259, "probe"), (269, "confirm"),
                                                         (268, "size below")]
    assert search.state == "done" and search.answer.size == 268 == truth(resnet_curve, budget, limit=272)


def test_a_short_reach_is_confirmed_without_a_third_probe():
    curve = lambda s: 2_000_000 + 500_000 * s  # noqa: E731
    search = run(curve, 24 << 20, base=8)
    assert [p.role for p in search.points][:3] == ["probe", "probe", "confirm"]


def finished_result(name="step"):
    from xla_lab.precompile.budget import Budget
    from xla_lab.precompile.fit import FitResult

    return FitResult(name, {"x": 0}, 8, Budget(10_000, "9.77 KiB"), search=FitSearch(10_000, 8))


def test_live_widget_follows_the_fit_and_keeps_a_static_bundle():
    """The widget shows the fit as it goes (throttled), always shows the finished answer, and its
    saved bundle is the static text and HTML (what a reopened notebook shows)."""
    pytest.importorskip("ipywidgets")
    from xla_lab.view.fit_view import live_widget

    r = finished_result()
    widget = live_widget(r, min_interval=3600)  # (only the end gets through the throttle)
    assert "queued" in widget.value
    s = r.search
    r.state = "running"
    while (nxt := s.next()) is not None:
        r.progress = f"compiling x[0]={nxt[0]}"
        r._changed()
        s.add(Point(nxt[0], 1000 + 100 * nxt[0], nxt[1]))
    assert "compiling x[0]=8" in widget.value  # the first news is shown, the rest within the interval is not
    r.state = s.state
    r._done.set()
    r._changed()
    assert "largest x[0] within 9.77 KiB: 90" in widget.value and "<svg" in widget.value
    bundle = widget._repr_mimebundle_()
    from xla_lab.view.fit_view import to_text

    assert bundle["text/plain"] == to_text(r.to_dict()) and bundle["text/html"] == widget.value
    assert repr(widget) == to_text(r.to_dict()) and "0x" not in repr(widget)


def test_fits_have_a_section_of_the_static_report():
    from xla_lab.view.static_html import report_html

    assert "Will it fit?" not in report_html([])
    page = report_html([], fits=[result_dict()])
    assert "Will it fit? (1 fit)" in page and page.count("fit-point") == len(result_dict()["points"])
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_the_tutorials_saved_outputs_render_inert():
    """notebooks/09_will_it_fit.ipynb opened untrusted: its outputs are text and static HTML/SVG that
    need no script (no widget without its state, no script, no event handler, no javascript: link)."""
    import html.parser
    import json
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "..", "notebooks", "09_will_it_fit.ipynb")
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    htmls = []

    class Check(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            assert tag not in ("script", "iframe", "object", "embed", "foreignobject"), tag
            for name, value in attrs:
                assert not name.startswith("on"), (tag, name)
                assert "javascript:" not in (value or "").lower(), (tag, name)

    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            assert set(data) <= {"text/plain", "text/html"}, set(data)
            if "text/html" in data:
                page = "".join(data["text/html"])
                Check().feed(page)
                htmls.append(page)
    assert sum("<svg" in h for h in htmls) == 2  # the two fits' pictures


def test_a_flat_line_with_a_size_over_the_budget_bisects():
    """Two probes with the same peak (padding to a tile), then one over the budget: the line cannot
    say where the budget is reached, so the search bisects to a compiled bracket."""
    curve = lambda s: 1_000_000 if s <= 16 else 1_000_000 + 200_000 * (s - 16)  # noqa: E731
    search = FitSearch(2_000_000, 8)
    search.add(Point(8, curve(8), "probe"))
    search.add(Point(16, curve(16), "probe"))
    search.add(Point(64, curve(64), "refine"))
    while (nxt := search.next()) is not None:
        search.add(Point(nxt[0], curve(nxt[0]), nxt[1]))
    assert search.state == "done" and search.answer.size == truth(curve, 2_000_000)
