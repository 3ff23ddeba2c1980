"""Guess the graphs the user is about to need, from the steps they ran.

Each guess is a ``Variant``: a step, the call whose arguments it borrows, the shapes that change, and
the module mode. In the order they are usually needed:

1. the same call again from the current state: after a first step this is the steady-state graph
   (the optimizer created its state, so the graph changed);
2. the last short batch of a DataLoader feeding the step (``len(dataset) % batch_size``);
3. the step in the other module mode it has been run in (train / eval);
4. other marked steps that take the same arguments by name (an eval step after a train step; a step
   never run yet only when it declares its mode),
   with the latest shapes;
5. declared shape buckets (e.g. sequence lengths), nearest first;
6. declared variants (``variants=`` or ``%xla queue add``).

A step called several times before one sync (an eval comprehension, gradient accumulation without a
sync per micro-step) makes one graph of all those calls. Once such a graph has run, the planner plans
the same kinds of variant for the whole group of calls (the group again in its steady state, the last
short batch on its last call, the other mode, buckets, declared variants), and a shorter last group
where a DataLoader's length is not a multiple of the group's size.

A variant whose key (step, state fingerprint, shapes, mode) has already run is dropped: its graph is
in XLA's cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from .marked import MarkedCall, MarkedFunction, state_fingerprint


@dataclass
class Variant:
    step: MarkedFunction
    call: MarkedCall  # whose arguments the shadow copies
    shapes: dict[str, tuple[int, ...]]  # every XLA tensor argument's shape in this variant
    training: bool | None
    reason: str
    # planned although a real call with the same key already ran: after a step's first call the next
    # graph can still differ (state the first step made, or moved from the host into a graph's
    # outputs: BatchNorm's num_batches_tracked), and a job whose graph is cached costs only a trace
    unsure: bool = False
    # a group job: the calls that run as one graph, in order (the first is ``call`` itself when it
    # runs, on the shadow of its own arguments; later ones are MarkedCall.light), each one's shapes,
    # and which results it holds through its sync (the ones the user held: outputs of the graph, part
    # of its hash). Empty for one call, whose result is always held, as in ``loss = step(...)``.
    group: list[MarkedCall] = field(default_factory=list)
    group_shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    held: list[bool] = field(default_factory=list)

    def changed(self) -> dict[str, tuple[int, ...]]:
        """Arguments whose shape differs from the call's: the shadow gives them fresh zero tensors."""
        return {k: v for k, v in self.shapes.items() if self.call.shapes.get(k) != v}

    def key(self) -> tuple:
        return (self.step.name, id(self.step), state_fingerprint(list(self.call.bound().values())),
                _shapes_key(self.group_shapes or [self.shapes]), self.training)

    @property
    def calls(self) -> int:
        return len(self.group) or 1

    def label(self) -> str:
        first = self.group_shapes[0] if self.group else self.shapes
        shapes = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in first.items())
        mode = {True: "train", False: "eval", None: ""}[self.training]
        times = ""
        if self.calls > 1:
            last = self.group_shapes[-1]
            tail = "" if last == first else ", the last with " + ", ".join(
                f"{k} {'x'.join(map(str, v))}" for k, v in last.items() if first.get(k) != v)
            times = f" x{self.calls} in one graph{tail}"
        return f"{self.step.name}({shapes}){times}{' ' + mode if mode else ''}"


def _shapes_key(shapes: list[dict]) -> tuple:
    """Shapes of the calls of one graph; one call's as they always were."""
    keys = [tuple(sorted(s.items())) for s in shapes]
    return keys[0] if len(keys) == 1 else tuple(keys)


def call_key(call: MarkedCall) -> tuple:
    """The key of what a real call compiled (its state before the call)."""
    return group_key([call])


def group_key(calls: list[MarkedCall]) -> tuple:
    """The key of what real calls compiled as one graph (their first one's state before them)."""
    first = calls[0]
    return (first.step.name, id(first.step), first.state_before, _shapes_key([c.shapes for c in calls]),
            first.training)


def find_loaders(namespace: dict[str, Any] | None, extra: Iterable = ()) -> list[tuple[str, Any]]:
    """DataLoaders in the notebook's namespace (or given), unwrapping torch_xla's device loaders."""
    from torch.utils.data import DataLoader

    found: list[tuple[str, Any]] = []
    seen: set[int] = set()
    candidates = list((namespace or {}).items()) + [(getattr(x, "__name__", "loader"), x) for x in extra]
    for name, value in candidates:
        if name.startswith("_"):
            continue
        inner = getattr(value, "_loader", value)  # MpDeviceLoader / ParallelLoader keep the DataLoader
        if isinstance(inner, DataLoader) and id(inner) not in seen:
            seen.add(id(inner))
            found.append((name, inner))
    return found


def tail_batch(loader) -> int | None:
    """Size of the last, short batch of a DataLoader (None when every batch is full)."""
    batch_size = getattr(loader, "batch_size", None)
    if not batch_size or getattr(loader, "drop_last", False):
        return None
    try:
        n = len(loader.dataset)
    except TypeError:  # iterable datasets have no length
        return None
    rest = n % batch_size
    return rest or None


def feeds(loader, shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """The tensor arguments a DataLoader's batches fit: each sample's tensors, batched, must match
    an argument's shape. [] when the loader does not feed this call."""
    batch = loader.batch_size
    try:
        sample = loader.dataset[0]
    except Exception:  # iterable or odd datasets: fall back on the batch size alone
        return [k for k, v in shapes.items() if v and v[0] == batch]
    items = sample if isinstance(sample, (tuple, list)) else [sample]
    wanted = [(batch, *getattr(t, "shape", ())) for t in items if hasattr(t, "shape")]
    matched = []
    for shape in wanted:
        name = next((k for k, v in shapes.items() if tuple(v) == tuple(shape) and k not in matched), None)
        if name is None:
            return []
        matched.append(name)
    return matched


def _with_dim(shapes: dict[str, tuple[int, ...]], dims: dict[str, int], size: int) -> dict:
    out = dict(shapes)
    for name, dim in dims.items():
        if name in out and -len(out[name]) <= dim < len(out[name]):
            s = list(out[name])
            s[dim] = size
            out[name] = tuple(s)
    return out


def plan(steps: list[MarkedFunction], namespace: dict[str, Any] | None = None) -> list[Variant]:
    """Variants worth compiling now, most likely first (duplicates removed, already-run ones kept:
    the queue drops those it has seen)."""
    out: list[Variant] = []
    latest = sorted((_typical(s) for s in steps if s.calls), key=lambda c: -c.seq)
    grouped = {id(step): group for step in steps if not step.problems and len(group := step.fused_group()) > 1}
    for step in steps:
        if id(step) in grouped:
            out += _group_variants(step, grouped[id(step)], namespace)
            continue
        if not step.calls or step.problems:
            continue
        call = step.calls[-1]
        mode = _mode(step, call.training)
        first_step = call.state_before != call.state_after
        if first_step:
            out.append(Variant(step, call, dict(call.shapes), mode, "steady state (the first step created optimizer state)"))
        elif len(step.calls) == 1:
            out.append(Variant(step, call, dict(call.shapes), mode,
                               "the second step (its graph can differ from the first's with the same shapes)",
                               unsure=True))
        else:
            out.append(Variant(step, call, dict(call.shapes), mode, "next step"))
        out += _tail_batches(step, call, mode, namespace)
        for other in {c.training for c in step.calls} - {call.training, None}:
            if step.mode is None:
                out.append(Variant(step, call, dict(call.shapes), other, "the other mode this step ran in"))
    # Steps run with other shapes, or never run but declared for a mode (an eval step): borrow the
    # latest call's arguments by name.
    for step in steps:
        if step.problems or (not step.calls and step.mode is None):
            continue
        for call in latest:
            if call.step is step:
                continue
            bound = call.bound()
            if not set(step.parameters) <= set(bound):
                continue
            borrowed = _borrow(step, call)
            if step.calls and borrowed.shapes == step.calls[-1].shapes:
                continue
            out.append(borrowed)
            out += _tail_batches(step, borrowed.call, borrowed.training, namespace)  # its pass ends short too
            break
    for step in steps:
        if step.problems or not step.calls or not step.buckets or id(step) in grouped:
            continue
        call = _typical(step)
        for size, shapes in _bucket_shapes(step, call):
            out.append(Variant(step, call, shapes, _mode(step, call.training), f"declared bucket {size}"))
    for step in steps:
        if step.problems or not step.calls or id(step) in grouped:
            continue
        call = _typical(step)
        for shapes in _declared_shapes(step, call):
            out.append(Variant(step, call, shapes, _mode(step, call.training), "declared variant"))
    unique: dict[tuple, Variant] = {}
    for v in out:
        unique.setdefault((id(v.step), _shapes_key(v.group_shapes or [v.shapes]), v.training), v)
    return list(unique.values())


def _bucket_shapes(step: MarkedFunction, call: MarkedCall) -> list[tuple[int, dict]]:
    current = next((call.shapes[n][d] for n, d in step.bucket_dims.items() if n in call.shapes), None)
    return [(size, _with_dim(call.shapes, step.bucket_dims, size))
            for size in sorted(step.buckets, key=lambda b: (abs(b - current) if current else b, b))]


def _declared_shapes(step: MarkedFunction, call: MarkedCall) -> list[dict]:
    out = []
    for declared in step.variants:
        shapes = dict(call.shapes)
        shapes.update({k: tuple(v) for k, v in declared.items()})
        out.append(shapes)
    return out


def _group_variants(step: MarkedFunction, group: list[MarkedCall], namespace) -> list[Variant]:
    """The variants of a group of calls that ran as one graph: the kinds a single call gets, for the
    whole group. A shape that changes (a bucket, a declared variant) changes in every call that had
    the first call's shape; the last short batch of a DataLoader goes to the group's last call."""
    first, more = group[0], group[1:]
    mode = _mode(step, first.training)
    k = len(group)

    def variant(shapes: dict, reason: str, training=mode, count: int = k, last: dict | None = None) -> Variant:
        changed = {n: v for n, v in shapes.items() if first.shapes.get(n) != v}
        # a shorter group keeps the group's last call (its flags: an optimizer step at the end)
        runs = [first] + more if count == k else [first] + more[:count - 2] + [more[-1]] if count > 1 else [more[-1]]
        run_shapes = [{n: changed.get(n, v) if c.shapes.get(n) == first.shapes.get(n) else v
                       for n, v in c.shapes.items()} for c in runs]
        if last is not None:
            run_shapes[-1] = {**run_shapes[-1], **last}
        return Variant(step, first, run_shapes[0] if runs[0] is first else dict(first.shapes), training, reason,
                       group=runs, group_shapes=run_shapes, held=[c.kept() for c in runs])

    state_changed = first.state_before != group[-1].state_after
    out = [variant(dict(first.shapes), f"the {k} calls that run as one graph, again"
                   + (" (their first run created optimizer state)" if state_changed else ""))]
    for name, loader in find_loaders(namespace, step.loaders):
        fed = feeds(loader, first.shapes)
        if not fed:
            continue
        rest = tail_batch(loader)
        tail = _with_dim(first.shapes, {n: 0 for n in fed}, rest) if rest else None
        try:
            short = len(loader) % k
        except TypeError:  # an iterable dataset: no length
            short = 0
        if short:  # the epoch ends with a shorter group, the last short batch in its last call
            out.append(variant(dict(first.shapes), f"the last group of {name}'s {len(loader)} batches: "
                               f"{short} call{'s' if short > 1 else ''}", count=short, last=tail))
        elif tail is not None:
            out.append(variant(dict(first.shapes), f"last short batch of {name} ({rest} of {loader.batch_size}) "
                               "in the group's last call", last=tail))
    for other in {c.training for c in step.calls} - {first.training, None}:
        if step.mode is None:
            out.append(variant(dict(first.shapes), "the other mode this step ran in", training=other))
    for size, shapes in _bucket_shapes(step, first):
        out.append(variant(shapes, f"declared bucket {size}"))
    for shapes in _declared_shapes(step, first):
        out.append(variant(shapes, "declared variant"))
    return out


def _tail_batches(step: MarkedFunction, call: MarkedCall, mode: bool | None, namespace) -> list[Variant]:
    """The call with the last, short batch of each DataLoader that feeds it."""
    out = []
    for name, loader in find_loaders(namespace, step.loaders):
        rest = tail_batch(loader)
        dims = {k: 0 for k in feeds(loader, call.shapes)} if rest else {}
        if rest and dims:
            out.append(Variant(step, call, _with_dim(call.shapes, dims, rest), mode,
                               f"last short batch of {name} ({rest} of {loader.batch_size})"))
    return out


def _typical(step: MarkedFunction) -> MarkedCall:
    """The latest of the step's recent calls with the largest batch: a short last batch is a poor
    guess for the shapes of another step."""
    def batch(call: MarkedCall) -> int:
        return max((v[0] for v in call.shapes.values() if v), default=0)

    biggest = max(batch(c) for c in step.calls)
    return [c for c in step.calls if batch(c) == biggest][-1]


def _mode(step: MarkedFunction, current: bool | None) -> bool | None:
    if step.mode == "train":
        return True
    if step.mode == "eval":
        return False
    return current


def _borrow(step: MarkedFunction, call: MarkedCall) -> Variant:
    """``step`` run with the arguments of another step's call, matched by parameter name."""
    bound = call.bound()
    names = [n for n in step.parameters if n in bound]
    borrowed = MarkedCall(step, tuple(bound[n] for n in names), {}, names,
                        {n: call.shapes[n] for n in names if n in call.shapes},
                        call.training, call.state_after, call.state_after, seq=call.seq)
    return Variant(step, borrowed, dict(borrowed.shapes), _mode(step, call.training),
                   f"{step.name} with the arguments of {call.step.name}")
