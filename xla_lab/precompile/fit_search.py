"""Which sizes to compile to find the largest one whose peak fits a budget, and the affine model that
picks them. Pure: it sees only (size, peak) points, so it is tested without a compiler.

A train step's peak is usually affine in the batch (or sequence length): the weights and optimizer
state are fixed, activations grow with the size. So:

1. a probe at the size the step last ran with. Its buffer assignment says how much of that peak is
   temporaries (activations and gradients in flight: what grows with the size) and how much is
   parameters and outputs (weights, optimizer state, inputs: fixed, or nearly);
2. a second probe where those two parts say the budget is reached (``fixed + temporaries/base x size``),
   rounded to the nearest size: near the answer from the start;
3. the line through the two probes, ``peak = a + b x size``, puts the budget at some size ``x``; one
   compile at ``x`` rounded to the nearest size (the confirm: it says how far off the line was);
4. one compile next to it: the size up when the confirm fits, the size down when it does not.

Four compiles when the line is off by less than one size either way: the answer is then the confirm
(and the size up is over) or the size below it (and the confirm is over). Rounding ``x`` to the nearest
size, not down, is what centres that window on the line's prediction. (One size is about 1% of the
budget on the zoo's steps, so a line aimed at the answer from far below, within 1%, still landed one
size off half the time: the fifth compile the benchmark counted before.) When the line's size is one
compiled already, the compile next to it is the confirm: three compiles.

Without a breakdown (a point given by hand), the second probe is ``base x budget / peak`` (all of the
peak grown with the size: below the answer for an affine peak with a fixed part). When the line would
extrapolate far beyond its probes (more than ``EXTRAPOLATE`` times the distance between them: a step
whose weights, gradients and optimizer state are most of its peak at the base size, so the second
probe is close to the first), the size it predicts is a third probe instead of the confirm, and the
line is drawn through the second and third probes: near the budget, where the answer is. Why: at
small sizes the peak grows more slowly than further out (on the CPU client ResNet-18's train step grew
by 0.48 MiB per image from 4 to 7 images and by 0.59 MiB per image from 7 to 128: XLA's buffer
assignment packs small activations into buffers that are live anyway), and a line extrapolated from
there was 9% off at the answer. When the peak is not affine (XLA pads a dimension to a tile size, fuses
or rematerializes differently at another size), the search goes on from the two compiled points
nearest the budget (a secant) and bisects when that stalls, so the answer is always a compiled size
that fits next to one that does not; the result says that the curve was not affine there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_COMPILES = 10  # a search that has not settled by then reports the bracket it has
EXTRAPOLATE = 2.0  # a line asked to reach further than this many times its probes' span gets a third probe


@dataclass
class Point:
    size: int
    peak: int  # bytes, from the compiled program's buffer assignment
    role: str  # "probe" | "confirm" | "next size up" | "size below" | "refine"
    compiled: bool = True  # False: read from an earlier compile of the same variant
    compile_s: float = 0.0
    graph_hash: str | None = None
    # of ``peak``, the bytes of temporaries in the buffer assignment (what grows with the size); None
    # when not known
    grows: int | None = None

    def to_dict(self) -> dict:
        return {"size": self.size, "peak": self.peak, "role": self.role, "compiled": self.compiled,
                "compile_s": round(self.compile_s, 3), "graph_hash": self.graph_hash, "grows": self.grows}


@dataclass
class Line:
    a: float  # bytes at size 0 (weights, optimizer state, ...)
    b: float  # bytes per unit of size

    def peak(self, size: int) -> float:
        return self.a + self.b * size

    def largest_within(self, budget: int) -> float:
        return (budget - self.a) / self.b if self.b > 0 else float("inf")


def line_through(p: Point, q: Point) -> Line:
    if p.size == q.size:
        return Line(float(p.peak), 0.0)
    b = (q.peak - p.peak) / (q.size - p.size)
    return Line(p.peak - b * p.size, b)


@dataclass
class FitSearch:
    budget: int
    base: int  # the size the step last ran with
    multiple: int = 1  # sizes are multiples of this
    max_size: int | None = None
    max_compiles: int = MAX_COMPILES
    points: list[Point] = field(default_factory=list)
    line: Line | None = None  # from the two probes
    confirm: Point | None = None  # the first compile at the line's prediction
    predicted_peak: float | None = None  # the line's peak at the confirmed size
    state: str = "searching"  # "searching" | "done" | "nothing fits" | "no limit" | "gave up"

    def __post_init__(self):
        if self.multiple < 1:
            raise ValueError("the size multiple must be 1 or more")
        if self.max_size is not None and self.max_size < self.multiple:
            raise ValueError(f"the largest size to try ({self.max_size}) is below the multiple ({self.multiple})")

    # --- what is known ------------------------------------------------------------------------
    def _round(self, size: float) -> int:
        m = self.multiple
        out = max(m, int(size // m) * m)
        if self.max_size is not None:
            out = min(out, (self.max_size // m) * m)
        return out

    def _nearest(self, size: float) -> int:
        """``size`` rounded to the nearest multiple (not down), within the sizes allowed."""
        m = self.multiple
        return self._round(int(size / m + 0.5) * m if size != float("inf") else size)

    def at(self, size: int) -> Point | None:
        return next((p for p in self.points if p.size == size), None)

    @property
    def fits(self) -> list[Point]:
        return sorted((p for p in self.points if p.peak <= self.budget), key=lambda p: p.size)

    @property
    def over(self) -> list[Point]:
        return sorted((p for p in self.points if p.peak > self.budget), key=lambda p: p.size)

    @property
    def lo(self) -> Point | None:
        """The largest compiled size that fits."""
        return self.fits[-1] if self.fits else None

    @property
    def hi(self) -> Point | None:
        """The smallest compiled size that does not fit."""
        return self.over[0] if self.over else None

    @property
    def answer(self) -> Point | None:
        return self.lo if self.state == "done" or (self.state == "gave up" and self.lo) else None

    @property
    def compiles(self) -> int:
        return sum(1 for p in self.points if p.compiled)

    @property
    def prediction_error(self) -> float | None:
        """(compiled - predicted) / compiled at the confirmed size."""
        if self.confirm is None or self.predicted_peak is None or not self.confirm.peak:
            return None
        return (self.confirm.peak - self.predicted_peak) / self.confirm.peak

    @property
    def affine(self) -> bool:
        err = self.prediction_error
        return err is None or abs(err) <= 0.05

    # --- what to compile next -----------------------------------------------------------------
    def next(self) -> tuple[int, str] | None:
        """The next (size, role) to compile, or None when the search is over (see ``state``)."""
        if self.state != "searching":
            return None
        probes = self._probes()
        for size in probes:
            if self.at(size) is None:
                return size, "probe"
        if self.line is None:
            self.line = line_through(self.at(probes[-2]), self.at(probes[-1]))
        lo, hi, m = self.lo, self.hi, self.multiple
        if hi is not None and hi.size <= m:
            self.state = "nothing fits"
            return None
        if lo is not None and hi is not None and hi.size - lo.size <= m:
            self.state = "done"
            return None
        if lo is not None and self.max_size is not None and lo.size + m > self.max_size:
            self.state = "done"  # everything up to the largest size allowed fits
            return None
        if len(self.points) >= self.max_compiles:
            self.state = "gave up"
            return None
        if self.confirm is None:
            if self.line.b <= 0 and hi is None:
                self.state = "no limit"  # the peak does not grow with the size
                return None
            reach = self.line.largest_within(self.budget)
            if reach == float("inf"):  # flat, with a size over the budget known: the bracket's middle
                reach = ((lo.size if lo else 0) + hi.size) / 2
            size = self._nearest(reach)
            known = self.at(size)
            if known is not None:  # the line lands on a probe: the size next to it decides
                size = size + m if known.peak <= self.budget else size - m
            inside = (lo is None or size > lo.size) and (hi is None or size < hi.size)
            if inside and self.at(size) is None and m <= size and (self.max_size is None or size <= self.max_size):
                return size, "confirm"
            size = self._inside(self._round(reach), lo, hi)
            return size, "confirm"
        local = self._local_line()
        if local is None or local.b <= 0:  # flat between the nearest points (padding): bisect
            mid = (lo.size if lo else 0) + ((hi.size if hi else 2 * max(p.size for p in self.points)) -
                                            (lo.size if lo else 0)) / 2
            guess = self._round(mid)
        else:
            guess = self._round(local.largest_within(self.budget))
        if lo is not None and guess <= lo.size and (hi is None or hi.size > lo.size + m):
            return lo.size + m, "next size up"
        recent = [p.peak <= self.budget for p in self.points[-2:] if p.role != "probe"]
        if lo is not None and hi is not None and len(recent) == 2 and recent[0] == recent[1]:
            guess = self._round((lo.size + hi.size) / 2)  # the secant stalls on one side: bisect once
        size = self._inside(guess, lo, hi)
        if lo is not None and size == lo.size + m:
            return size, "next size up"
        if hi is not None and size == hi.size - m:
            return size, "size below"
        return size, "refine"

    def _probes(self) -> list[int]:
        """The base size, then where the base's breakdown puts the budget (its temporaries grown in
        proportion to the size, the rest fixed), rounded to the nearest size; without a breakdown, the
        size the budget would allow if the whole peak at the base grew with the size (``base * budget
        / peak``: never above the answer for an affine peak with a fixed part)."""
        first = self._round(self.base)
        p1 = self.at(first)
        if p1 is None:
            return [first]
        second = None
        if p1.grows and 0 < p1.grows <= p1.peak:
            fixed, per_unit = p1.peak - p1.grows, p1.grows / first
            estimate = (self.budget - fixed) / per_unit
            if estimate > 0:
                second = self._nearest(estimate)
        if second is None or second == first:
            second = self._round(first * self.budget / max(p1.peak, 1))
        if second == first:
            second = self._round(2 * first) if p1.peak <= self.budget else self._round(first // 2)
        if second == first:  # the largest size allowed is the base, or the base is the smallest
            second = self._round(first // 2) if first > self.multiple else self._round(2 * first)
        if second == first:
            return [first]
        p2 = self.at(second)
        if p2 is None:
            return [first, second]
        reach = line_through(p1, p2).largest_within(self.budget)
        span = abs(second - first)
        if reach == float("inf") or abs(reach - second) <= EXTRAPOLATE * span:
            return [first, second]
        third = self._round(reach)
        if third in (first, second):
            return [first, second]
        return [first, second, third]

    def _local_line(self) -> Line | None:
        """The line through the two compiled points whose peaks are nearest the budget (a secant that
        follows the curve where the answer is, convex or not)."""
        near = sorted(self.points, key=lambda p: abs(p.peak - self.budget))
        first = near[0] if near else None
        second = next((p for p in near[1:] if p.size != first.size), None) if first else None
        return line_through(first, second) if second is not None else None

    def _inside(self, size: int, lo: Point | None, hi: Point | None) -> int:
        """``size`` moved strictly between the known bracket, and off sizes already compiled (then
        the middle of the bracket: a bisection step)."""
        m = self.multiple
        low = lo.size + m if lo is not None else m
        high = hi.size - m if hi is not None else (self.max_size // m * m if self.max_size else None)
        clamped = size < low or (high is not None and size > high)
        size = max(size, low)
        if high is not None:
            size = min(size, high)
        if clamped and lo is not None and hi is not None and high - low > m:
            size = self._round((low + high) / 2)  # the line points outside the bracket: bisect
            size = min(max(size, low), high)
        if self.at(size) is not None:
            if high is None:
                size = 2 * max(p.size for p in self.points)
            else:
                size = self._round((low + high) / 2)
                size = min(max(size, low), high)
        return size

    def add(self, point: Point) -> None:
        if self.at(point.size) is not None:
            return
        self.points.append(point)
        if point.role == "confirm" and self.confirm is None and self.line is not None:
            self.confirm = point
            self.predicted_peak = self.line.peak(point.size)
