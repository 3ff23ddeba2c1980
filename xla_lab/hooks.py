"""How xla_lab hooks into IPython: one table of event callbacks (``KernelHooks``, the session's), the
gate that keeps user code from running beside a precompile job, which cell is running, and the syntax
check of ``%%xla`` cells.

The gate is an AST transformer, because IPython runs AST transformers for every execution (silent
ones from variable inspectors too) after ``pre_execute`` and ``pre_run_cell`` and right before the
execution's code: the last moment to wait, and the first at which the code is known (``%xla queue``
and the other read-only commands need not wait). An exception in an event callback is only printed
by IPython and the cell runs anyway, so the wait cannot live in one. SIGINT is held from
``pre_execute`` until the wait ends: an interrupt then reaches the cell once the job is done, as a
``KeyboardInterrupt`` raised in place of the cell's code (the cell does not run).
"""

from __future__ import annotations

import ast
import sys

from xla_lab import session as session_mod
from xla_lab.interrupts import HeldInterrupts

WAIT_NOTE = ("a precompile job is compiling and cannot be interrupted; the interrupt reaches the cell "
             "when the job ends (the cell will not run)")


def _queue():
    s = session_mod.current()
    return None if s is None else s.queue


class ForegroundGate:
    """No user code runs while a precompile job is in flight (see the module's docstring)."""

    def __init__(self):
        self._held: HeldInterrupts | None = None

    # pre_execute
    def before_execution(self) -> None:
        queue = _queue()
        if queue is not None and queue.kernel_busy() and self._held is None:
            self._held = HeldInterrupts(WAIT_NOTE)
            self._held.hold()

    # the AST transformer protocol
    def visit(self, tree: ast.AST) -> ast.AST:
        held, self._held = self._held, None
        queue = _queue()
        try:
            if queue is not None and queue.job_in_flight() and not _reads_only_xla_state(tree):
                if held is None:  # (pre_execute did not see the job: it started since)
                    held = HeldInterrupts(WAIT_NOTE)
                    held.hold()
                try:
                    queue.wait_for_job(out=sys.stdout)
                except KeyboardInterrupt:  # arrived although held (a handler we could not replace)
                    held = held or HeldInterrupts()
                    held.interrupted = True
        finally:
            if held is not None:
                held.release()
        if held is not None and held.interrupted:
            job = queue.last_wait.job if queue is not None and queue.last_wait else ""
            return interrupted_cell(job)
        return tree

    # post_execute
    def after_execution(self) -> None:
        held, self._held = self._held, None
        if held is not None:  # the execution never reached its code (a syntax error): nothing to deliver
            held.release()
        queue = _queue()
        if queue is not None:
            queue.kernel_idle()


def _reads_only_xla_state(tree: ast.AST) -> bool:
    """Is this execution just a ``%xla`` verb that reads or steers xla_lab's own state (``%xla queue``,
    ``%xla history``, ``%xla show ...``: the verbs' table says which)?"""
    body = getattr(tree, "body", None)
    if not isinstance(body, list) or len(body) != 1 or not isinstance(body[0], ast.Expr):
        return False
    call = body[0].value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and call.func.attr == "run_line_magic" and len(call.args) >= 2
            and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args[:2])
            and call.args[0].value == "xla"):
        return False
    from xla_lab import verbs

    return verbs.reads_only(call.args[1].value)


def interrupted_cell(job: str) -> ast.Module:
    """The code run in place of a cell that was interrupted while it waited for a job."""
    return ast.parse(f"raise __import__('xla_lab.hooks', fromlist=['cell_interrupt']).cell_interrupt({job!r})")


def cell_interrupt(job: str = "") -> KeyboardInterrupt:
    """The KeyboardInterrupt of a cell interrupted while it waited: it has no frames worth showing."""
    what = f"the precompile job {job}" if job else "a precompile job"
    exc = KeyboardInterrupt(f"interrupted while the cell waited for {what} to finish compiling; "
                            "the cell did not run")
    exc._render_traceback_ = lambda: [f"KeyboardInterrupt: {exc}"]  # (IPython: instead of a traceback)
    return exc


def check_xla_cell_syntax(lines: list[str]) -> list[str]:
    """An input transformer (IPython's first, on the raw cell): a ``%%xla`` cell whose code does not
    parse once transformed as a plain cell's (``cell_code``) raises its SyntaxError here, before
    anything runs, so IPython shows it as it shows a plain cell's (line and caret, no frames;
    ``error_before_exec``). Raised from the magic instead, it would come with every frame of IPython's
    magic machinery and of xla_lab."""
    if not lines or not lines[0].startswith("%%xla"):
        return lines
    from IPython import get_ipython

    from xla_lab.cell_code import check_syntax

    shell = get_ipython()
    if shell is None:
        return lines
    try:
        check_syntax(shell, "".join(lines[1:]))
    except SyntaxError as exc:
        # name the cell as IPython will, so the error reads "Cell In[N], line L" (L counts the %%xla line)
        exc.filename = shell.compile.cache("".join(lines), shell.execution_count)
        if exc.lineno is not None:
            exc.lineno += 1
            if exc.end_lineno is not None:
                exc.end_lineno += 1
        raise
    return lines


check_xla_cell_syntax.has_side_effects = True  # (IPython's completeness check must not run it)


class CellTracker:
    """Which execution is running: IPython numbers a cell before running it, and only the cell's
    ExecutionInfo (``pre_run_cell``) says whether it counts (``store_history``) and which notebook
    cell it is (``cell_id``). After a cell that was not ``%%xla``, keep the HLO of the graphs it
    compiled and keep the dump directory and logs from growing."""

    def __init__(self):
        self.info = None  # ExecutionInfo of the running cell (None for silent executions)
        self.xla = False  # the running execution is a %%xla cell
        self.progress = None  # its live compile progress, if shown (stopped here if the cell could not)

    # pre_execute (fires for silent executions too, which skip pre_run_cell)
    def before_execution(self) -> None:
        self.info, self.xla = None, False
        s = session_mod.current()
        if s is not None:  # the last %%xla cell's analysis (Session.defer) ends before anything else runs
            s.settle()

    # pre_run_cell
    def remember(self, info) -> None:
        self.info = info
        if getattr(info, "store_history", False):  # a prompt the notebook shows (capture/prompts.py)
            from IPython import get_ipython

            from xla_lab import cell_run

            shell, s = get_ipython(), session_mod.current()
            if shell is not None and s is not None:
                s.prompts.ran(cell_run.prompt_of(shell, info), getattr(info, "cell_id", None),
                              getattr(info, "raw_cell", "") or "")

    def xla_cell_started(self) -> None:
        self.xla = True

    def progress_shown(self, progress) -> None:
        """The running %%xla cell shows live compile progress: stopped after the cell if the cell could not."""
        self.progress = progress

    # post_run_cell
    def after_cell(self, result=None) -> None:
        progress, self.progress = self.progress, None
        if progress is not None:  # (normally stopped already, before the capture)
            progress.stop()
        if self.xla:
            return
        from xla_lab import cell_run

        if result is not None and getattr(result, "error_in_exec", None) is not None:
            from IPython import get_ipython

            cell_run.repair_and_note_lost_tensors(get_ipython(), result.error_in_exec)  # a plain cell's graph may have failed
        s = session_mod.current()
        if s is not None:
            try:
                s.absorb_outside_work()
            except Exception as exc:  # never disturb the user's cell for this
                print(f"xla_lab: could not read XLA's output after the cell: {exc}", file=sys.stderr)


class KernelHooks:
    """The session's gate and cell tracker (``Session.hooks``), and the table of xla_lab's only IPython
    callbacks, registered and unregistered from here."""

    def __init__(self):
        self.gate = ForegroundGate()
        self.cells = CellTracker()
        self.events = (("pre_execute", self.gate.before_execution), ("pre_execute", self.cells.before_execution),
                       ("pre_run_cell", self.cells.remember), ("post_run_cell", self.cells.after_cell),
                       ("post_execute", self.gate.after_execution))


def of(session) -> KernelHooks:
    """The session's hooks (made on first use)."""
    if session.hooks is None:
        session.hooks = KernelHooks()
    return session.hooks


def register(ipython, session) -> None:
    """Register the session's event callbacks and gate (once, however often the extension loads)."""
    hooks = of(session)
    for event, callback in hooks.events:
        if callback not in ipython.events.callbacks[event]:
            ipython.events.register(event, callback)
    if hooks.gate not in ipython.ast_transformers:
        ipython.ast_transformers.insert(0, hooks.gate)
    if check_xla_cell_syntax not in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.append(check_xla_cell_syntax)


def unregister(ipython, session) -> None:
    hooks = of(session)
    for event, callback in hooks.events:
        if callback in ipython.events.callbacks[event]:
            ipython.events.unregister(event, callback)
    if hooks.gate in ipython.ast_transformers:
        ipython.ast_transformers.remove(hooks.gate)
    if check_xla_cell_syntax in ipython.input_transformers_cleanup:
        ipython.input_transformers_cleanup.remove(check_xla_cell_syntax)
