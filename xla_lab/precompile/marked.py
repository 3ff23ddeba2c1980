"""``@xla_lab.step`` marks a function that runs a training or eval step (a ``MarkedFunction``), so the
precompile queue can run it on shadow state. ("Step" alone, elsewhere in xla_lab, is one sync of the
lazy graph: a ``StepRecord``.)

The rule a step must follow: **its state comes through its arguments** (modules, optimizers, tensors)
**and it writes no globals**. Then a precompile job can copy the arguments, run the step on the copy
with inputs of the shape the user will need next, and compile that graph while the user reads, and
nothing the user owns changes. ``check_rule`` reads the function's bytecode and names what breaks the
rule; such steps still run normally, they are just never precompiled.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import inspect
import itertools
import threading
import time
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .shadow import SameAs, TensorSpec, is_xla_tensor, reachable_tensors

_in_job = threading.local()  # set while a precompile job runs a marked function on a shadow
_call_numbers = itertools.count()


def in_job() -> bool:
    return getattr(_in_job, "active", False)


@contextlib.contextmanager
def running_in_job():
    """While a precompile job calls a marked function on its shadow: calls are not recorded."""
    _in_job.active = True
    try:
        yield
    finally:
        _in_job.active = False


@dataclass
class MarkedCall:
    """What a step was called with: enough to build a shadow and to name its variants."""

    step: "MarkedFunction"
    args: tuple
    kwargs: dict
    names: list[str]  # parameter names of the positional args
    shapes: dict[str, tuple[int, ...]]  # XLA tensor arguments -> shape
    training: bool | None  # mode of the first module argument
    state_before: tuple  # state fingerprint before the call (see state_fingerprint)
    state_after: tuple = ()
    seq: int = 0  # order of calls across all steps
    # torch_xla's graph runs (syncs that ran a graph, cached or not) before and after the call: calls
    # with none between or inside them end up in one graph (see MarkedFunction.group)
    runs: tuple[int, int] = (0, 0)
    at: float = 0.0  # when the call started (time.time())
    # weak references to the device tensors the call returned: which results the user kept alive
    results: list = field(default_factory=list, repr=False)
    held: bool | None = None  # kept(), as it was when the next group of the step began

    def kept(self) -> bool:
        """Did the user hold what this call returned when its graph ran (a list of predictions does;
        ``out = step(x)`` in a loop drops each result at the next call), so that it was among the
        graph's outputs? Read when the step's next group begins (before that call's result replaces
        anything), or now for the latest group."""
        if self.held is not None:
            return self.held
        return any(ref() is not None for ref in self.results)

    def bound(self) -> dict[str, Any]:
        out = dict(zip(self.names, self.args))
        out.update(self.kwargs)
        return out

    def light(self, first: "MarkedCall") -> "MarkedCall":
        """This call as a later call of ``first``'s group keeps it: each tensor argument that is not
        one of ``first``'s arguments as a ``TensorSpec`` (its shape and type: a replay makes a fresh
        one), so a group of a hundred calls keeps no hundred batches alive."""
        same = {id(v): name for name, v in first.bound().items() if is_xla_tensor(v)}

        def spec(v):
            return SameAs(same[id(v)]) if id(v) in same else TensorSpec(tuple(v.shape), v.dtype, str(v.device))

        args = tuple(spec(v) if is_xla_tensor(v) else v for v in self.args)
        kwargs = {k: spec(v) if is_xla_tensor(v) else v for k, v in self.kwargs.items()}
        return MarkedCall(self.step, args, kwargs, self.names, self.shapes, self.training, self.state_before,
                          self.state_after, self.seq, self.runs, self.at, self.results, self.held)


MAX_GROUP = 256  # calls of one step kept per graph; a longer run is not replayed


def graph_runs() -> int:
    """How many syncs have run a graph in this process (a cache hit or a compile each)."""
    import torch_xla

    counter = torch_xla._XLAC._xla_counter_value
    return (counter("CachedCompile") or 0) + (counter("UncachedCompile") or 0)


def state_fingerprint(values: list[Any]) -> tuple:
    """Shapes and dtypes of every device tensor the step's state reaches: modules, optimizers and
    containers, not the tensor arguments themselves (their shapes are part of a call's key on their
    own). Step 0 of an optimizer creates its state, which changes this, and with it the graph.
    Computed twice per call of a marked step, so in the order the objects are walked (the same for
    the same objects) rather than sorted by tensor id, which costs a call into torch_xla per tensor."""
    state = [v for v in values if not is_xla_tensor(v)]
    return tuple((tuple(t.shape), t.dtype) for t in reachable_tensors(state))


def module_mode(values: list[Any]) -> bool | None:
    for v in values:
        if isinstance(v, torch.nn.Module):
            return v.training
    return None


class MarkedFunction:
    """A step function that records its calls for the precompile planner. Calling it calls ``fn``."""

    def __init__(self, fn: Callable, *, buckets: list[int] | None = None,
                 bucket_dims: dict[str, int] | None = None,
                 variants: list[dict[str, tuple[int, ...]]] | None = None,
                 mode: str | None = None, loaders: list | None = None):
        if mode not in (None, "train", "eval"):
            raise ValueError(f"mode must be 'train', 'eval' or None, got {mode!r}")
        if buckets and not bucket_dims:
            raise ValueError("buckets need bucket_dims: which dimension of which argument takes the bucket "
                             "sizes, e.g. bucket_dims={'x': 1, 'y': 1}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = getattr(fn, "__qualname__", getattr(fn, "__name__", "step"))
        self.parameters = list(inspect.signature(fn).parameters)
        self.buckets = list(buckets or [])
        self.bucket_dims = dict(bucket_dims or {})
        self.variants = [dict(v) for v in (variants or [])]
        self.mode = mode
        self.loaders = list(loaders or [])
        self.problems = check_rule(fn)
        self.calls: list[MarkedCall] = []  # the last few calls
        # The latest calls that went into one graph: consecutive calls with no graph run between or
        # inside them (an eval comprehension, gradient accumulation without a sync per micro-step).
        # The first is kept whole, the rest light (MarkedCall.light). One call when each call syncs.
        self.group: list[MarkedCall] = []
        self.group_overflow = False  # the run was longer than MAX_GROUP calls
        self.past_groups: list[list[MarkedCall]] = []  # the groups before it (their graphs ran), at most 3
        self.listeners: list[Callable[[MarkedCall], None]] = []
        for name in self.bucket_dims:
            if name not in self.parameters:
                raise ValueError(f"bucket_dims names {name!r}, which is not a parameter of {self.name}")

    def __call__(self, *args, **kwargs):
        if in_job():
            return self.fn(*args, **kwargs)
        names = self.parameters[:len(args)]
        values = list(args) + list(kwargs.values())
        bound = dict(zip(names, args))
        bound.update(kwargs)
        try:
            call = MarkedCall(self, args, kwargs, names,
                            {k: tuple(v.shape) for k, v in bound.items() if is_xla_tensor(v)},
                            module_mode(values), state_fingerprint(values), seq=next(_call_numbers),
                            at=time.time())
            runs_before = graph_runs()
        except Exception:  # arguments the queue cannot read: the step runs unrecorded, its errors its own
            return self.fn(*args, **kwargs)
        result = self.fn(*args, **kwargs)
        try:
            call.state_after = state_fingerprint(values)
            call.runs = (runs_before, graph_runs())
            call.results = [weakref.ref(t) for t in reachable_tensors([result])]
        except Exception:
            return result
        self.calls = self.calls[-3:] + [call]
        self._join_group(call)
        for listener in list(self.listeners):
            listener(call)
        return result

    def _join_group(self, call: MarkedCall) -> None:
        last = self.group[-1] if self.group else None
        fused = last is not None and last.runs[0] == last.runs[1] == call.runs[0] == call.runs[1]
        if not fused:
            if self.group and not self.group_overflow:
                for c in self.group:
                    c.held = c.kept()
                self.past_groups = self.past_groups[-2:] + [self.group]
            self.group, self.group_overflow = [call], False
        elif len(self.group) < MAX_GROUP:
            self.group.append(call.light(self.group[0]))
        else:
            self.group_overflow = True

    def fused_group(self) -> list[MarkedCall]:
        """The step's typical group of calls that ran as one graph: of its latest groups whose graphs
        ran, the latest of the most calls (an epoch of gradient accumulation ends with a shorter
        group, which is not the pattern). [] when each call ran a graph of its own."""
        done = list(self.past_groups)
        if self.group and not self.group_overflow and graph_runs() != self.group[-1].runs[1]:
            done.append(self.group)
        if not done:
            return []
        most = max(len(g) for g in done)
        return list([g for g in done if len(g) == most][-1]) if most > 1 else []

    def __repr__(self) -> str:
        return f"<xla_lab step {self.name}>"

    def __get__(self, obj, objtype=None):  # a decorated method binds like a function
        return self if obj is None else types.MethodType(self, obj)


def mark(fn: Callable | None = None, **options):
    """The decorator: ``@mark`` or ``@mark(buckets=[64, 128, 256], bucket_dims={'x': 1})``
    (``xla_lab.step`` also tells the kernel's precompile queue).

    Options: ``buckets`` (sizes a dimension takes, e.g. sequence lengths) with ``bucket_dims``
    (argument name -> dimension index); ``variants`` (list of {argument: shape} to precompile);
    ``mode`` ('train' or 'eval': run shadows in that mode); ``loaders`` (DataLoaders feeding the step,
    for their last short batch; DataLoaders in the notebook's namespace are found without it).
    """
    if fn is None:
        return lambda f: mark(f, **options)
    return MarkedFunction(fn, **options)


# --- the rule ---------------------------------------------------------------------------------

def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _kind(value: Any) -> str | None:
    """What about a global makes a job unsafe: None when it is fine to read."""
    if isinstance(value, torch.nn.Module):
        return f"a module, {type(value).__name__}"
    if isinstance(value, torch.optim.Optimizer):
        return f"an optimizer, {type(value).__name__}"
    if isinstance(value, torch.Tensor):
        return "a tensor"
    if isinstance(value, (list, dict, set, bytearray)):
        return f"a {type(value).__name__} it could change"
    return None


def check_rule(fn: Callable) -> list[str]:
    """Why a precompile job could not run ``fn`` without touching the user's objects ([] if it can)."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return [f"{fn!r} is not a Python function, so xla_lab cannot check what it touches"]
    problems: list[str] = []
    globals_ = getattr(fn, "__globals__", {})
    seen: set[str] = set()
    for co in _code_objects(code):
        for ins in dis.get_instructions(co):
            name = ins.argval if isinstance(ins.argval, str) else None
            if name is None or name in seen:
                continue
            if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                seen.add(name)
                problems.append(f"assigns the global {name!r}: pass it in and return it instead")
            elif ins.opname == "LOAD_GLOBAL" and name in globals_:
                kind = _kind(globals_[name])
                if kind:
                    seen.add(name)
                    problems.append(f"uses the global {name!r} ({kind}): pass it as an argument")
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            kind = _kind(cell.cell_contents)
        except ValueError:  # empty cell
            continue
        if kind:
            problems.append(f"uses {name!r} from an enclosing function ({kind}): pass it as an argument")
    return problems
