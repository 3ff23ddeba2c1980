"""Snapshots of ``torch_xla.debug.metrics`` and the samples a cell added.

Timings shown by xla_lab are never measured on the side: they are the samples torch_xla itself
recorded (CompileTime, ExecuteTime, transfers), picked out by count between two snapshots. Each sample
is ``(unix time at the end, nanoseconds)``; torch_xla keeps only the last ``XLA_METRICS_SAMPLES``
(1024) per metric, so for very long loops the earliest steps of a cell can lack per-step timings
while the totals (count and sum) stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass

TIMED = {
    "compile": ("CompileTime",),
    "execute": ("ExecuteTime", "ExecuteReplicatedTime"),
    "to_device": ("TransferToDeviceTime",),
    "from_device": ("TransferFromDeviceTime",),
    # eager mode (torch_xla.experimental.eager_mode): each op compiled and run on its own, no sync
    "eager_compile": ("EagerOpCompileTime",),
    "eager_execute": ("EagerOpExecuteTime",),
}
COUNTERS = ("UncachedCompile", "CachedCompile", "MarkStep")
# ``.item()`` is implemented as a CPU fallback of this op: it reads a value, it is not an op that
# failed to lower, so it is not reported among fallbacks.
NOT_FALLBACKS = {"aten::_local_scalar_dense"}


@dataclass
class Sample:
    end: float  # unix seconds when the timed section ended
    seconds: float

    @property
    def start(self) -> float:
        return self.end - self.seconds


@dataclass
class MetricState:
    count: int
    total_ns: float
    samples: list[tuple[float, float]]


class MetricsSnapshot:
    """Counts and totals of the metrics xla_lab uses, at one moment."""

    def __init__(self):
        import torch_xla.debug.metrics as met

        self._met = met
        names = set(met.metric_names())
        self.metrics: dict[str, MetricState] = {}
        for group in TIMED.values():
            for name in group:
                if name in names:
                    count, total, samples = met.metric_data(name)
                    self.metrics[name] = MetricState(count, total, samples)
                else:
                    self.metrics[name] = MetricState(0, 0.0, [])
        counter_names = met.counter_names()
        self.counters = {n: met.counter_value(n) or 0 for n in COUNTERS}
        # CPU fallbacks are counted per aten op, as counters named "aten::<op>".
        self.fallbacks = {n: met.counter_value(n) or 0 for n in counter_names if n.startswith("aten::") and n not in NOT_FALLBACKS}


class MetricsDelta:
    """What happened between two snapshots: new samples per kind, total seconds, counter deltas."""

    def __init__(self, before: MetricsSnapshot, after: MetricsSnapshot):
        self.samples: dict[str, list[Sample]] = {}
        self.totals_s: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.lost: dict[str, int] = {}
        for kind, names in TIMED.items():
            samples: list[Sample] = []
            total = 0.0
            count = 0
            lost = 0
            for name in names:
                b, a = before.metrics[name], after.metrics[name]
                new = a.count - b.count
                if new <= 0:
                    continue
                kept = a.samples[-new:] if new <= len(a.samples) else a.samples
                lost += new - len(kept)
                samples.extend(Sample(ts, ns / 1e9) for ts, ns in kept)
                total += (a.total_ns - b.total_ns) / 1e9
                count += new
            samples.sort(key=lambda s: s.end)
            self.samples[kind] = samples
            self.totals_s[kind] = total
            self.counts[kind] = count
            self.lost[kind] = lost
        self.counters = {n: after.counters[n] - before.counters.get(n, 0) for n in after.counters}
        self.fallbacks = {
            n.removeprefix("aten::"): v - before.fallbacks.get(n, 0)
            for n, v in after.fallbacks.items()
            if v - before.fallbacks.get(n, 0) > 0
        }

    def as_dict(self) -> dict:
        return {
            "totals_s": dict(self.totals_s),
            "counts": dict(self.counts),
            "counters": dict(self.counters),
            "samples_lost": {k: v for k, v in self.lost.items() if v},
        }
