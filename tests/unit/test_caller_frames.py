"""The sync hook's walk of its caller's frames (lean capture): the memo (and its shortcut for the last
two-frame chain) must give what a fresh walk gives, share the list for a repeated chain, and tell
different lines and call paths apart."""

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


TURNS_SOURCE = """
out = []
for _ in range(2):
    out.append(sync(memo))
    out.append(sync(memo))
    out.append(outside(memo))
    out.extend(twice(memo))
"""


def outside(walk):
    """A helper in another file between the cell and the sync: a chain of three frames."""
    return sync(walk)


def twice(walk):
    """Two syncs from one call, on two lines of a function outside the cell."""
    first = walk(sys._getframe(0))
    return [first, walk(sys._getframe(0))]


def test_the_last_chain_shortcut_never_gives_another_lines_frames():
    memo = CallerFrames(CELL)
    namespace = {"sync": sync, "outside": outside, "twice": twice, "memo": memo}
    exec(compile(TURNS_SOURCE, CELL, "exec"), namespace)
    first_turn, again = namespace["out"][:5], namespace["out"][5:]
    line4, line5, via, twice_first, twice_second = first_turn
    assert [f.line for f in line4] == [SYNC_LINE, 4] and [f.line for f in line5] == [SYNC_LINE, 5]
    assert [f.function for f in via] == ["sync", "outside", "<module>"] and via[-1].line == 6
    first_line = twice.__code__.co_firstlineno + 2
    assert [f.line for f in twice_first] == [first_line, 7] and [f.line for f in twice_second] == [first_line + 1, 7]
    assert again == first_turn and all(a is b for a, b in zip(again, first_turn))

