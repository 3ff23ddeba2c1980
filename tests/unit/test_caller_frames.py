"""The sync hook's walk of its caller's frames (lean capture): the memo must give what a fresh walk
gives, share the list for a repeated chain, and tell different lines and call paths apart."""

import sys

from xla_lab.capture.instrument import CallerFrames, caller_frames

CELL = "<ipython-input-7-cafe>"
CELL_SOURCE = """
def train_step(walk):
    return sync(walk)
out = []
for _ in range(3):
    out.append(sync(memo))
out.append(sync(memo))
out.append(train_step(memo))
out.append(train_step(fresh))
"""


def sync(walk):
    """Stands in for ``torch_xla.sync``: the hook sees this frame first."""
    return walk(sys._getframe(0))


SYNC_LINE = sync.__code__.co_firstlineno + 2


def _run_cell(memo) -> list:
    namespace = {"sync": sync, "memo": memo, "fresh": lambda f: caller_frames(f, CELL)}
    exec(compile(CELL_SOURCE, CELL, "exec"), namespace)
    return namespace["out"]


def test_memo_gives_what_a_fresh_walk_gives_and_shares_it():
    memo = CallerFrames(CELL)
    loop1, loop2, loop3, other_line, nested, nested_fresh = _run_cell(memo)
    assert [(f.function, f.file, f.line) for f in loop1] == [("sync", __file__, SYNC_LINE), ("<module>", CELL, 6)]
    assert loop2 is loop1 and loop3 is loop1  # one list for a loop's repeated sync
    assert other_line[-1].line == 7 and other_line is not loop1
    assert nested == nested_fresh
    assert [(f.function, f.line) for f in nested] == [("sync", SYNC_LINE), ("train_step", 3)]  # (the cell's first frame)


def test_a_new_memo_per_cell_and_the_limit_without_the_cell():
    first = _run_cell(CallerFrames(CELL))
    again = _run_cell(CallerFrames(CELL))
    assert again[0] == first[0] and again[0] is not first[0]
    elsewhere = _run_cell(CallerFrames("<not on the stack>", limit=3))
    assert [f.function for f in elsewhere[0]] == ["sync", "<module>", "_run_cell"]
