"""Which notebook cell each prompt was, so a line reference can name the cell as it is now.

A graph keeps the lines it was traced from: ``[2]:15`` is line 15 of the cell that ran as In[2]. After
the notebook is run again (Run All, without a restart) the same graphs are cache hits, and their lines
would still say ``[2]`` though that cell now shows ``[12]``. The kernel sees every cell before it runs
(``pre_run_cell``): its prompt, the notebook cell it is (``cell_id``, sent by JupyterLab, nbclient and
VS Code) and its text. A reference is moved to the newest prompt of the same cell when that run still
has the referenced line's code; without cell ids, runs of the same text count as the same cell.
"""

from __future__ import annotations

MAX_KEPT = 5_000  # prompts remembered (a long session's oldest are forgotten; their lines stay as recorded)


class CellPrompts:
    def __init__(self):
        self._runs: dict[int, tuple[object, str]] = {}  # prompt -> (cell identity, its text)
        self._newest: dict[object, int] = {}  # cell identity -> its newest prompt
        self._body: dict[int, list[str]] = {}  # prompt -> its lines as Python numbered them (split when first asked)

    def ran(self, prompt: int | None, cell_id: str | None, source: str) -> None:
        """A cell is about to run as ``prompt``."""
        if not isinstance(prompt, int):
            return
        ident = ("id", cell_id) if cell_id else ("text", source)
        self._runs[prompt] = (ident, source)
        if prompt >= self._newest.get(ident, -1):
            self._newest[ident] = prompt
        if len(self._runs) > MAX_KEPT:
            for old in sorted(self._runs)[: len(self._runs) - MAX_KEPT]:
                old_ident = self._runs.pop(old)[0]
                self._body.pop(old, None)
                if self._newest.get(old_ident) == old:  # (a cell known by its text holds that text here)
                    del self._newest[old_ident]

    def current(self, prompt: int, line: int | None, code: str | None) -> int:
        """The newest prompt of the cell that ran as ``prompt``, if that run has ``code`` at ``line``
        (``%%`` magic lines are not counted, as in captured lines); else ``prompt``."""
        known = self._runs.get(prompt)
        if known is None:
            return prompt
        newest = self._newest.get(known[0], prompt)
        if newest == prompt or newest not in self._runs:
            return prompt
        if code is not None:
            body = self._body.get(newest)
            if body is None:  # (asked once per line of every graph a view draws: split once)
                body = self._body[newest] = _body_lines(self._runs[newest][1])
            if not (isinstance(line, int) and 1 <= line <= len(body) and body[line - 1].strip() == code.strip()):
                return prompt
        return newest


def _body_lines(source: str) -> list[str]:
    """A cell's lines as Python numbered them: IPython drops a cell's leading blank lines before compiling
    it, and a cell magic's body starts after its ``%%`` line."""
    lines = source.splitlines()
    start = next((i for i, text in enumerate(lines) if text.strip()), 0)
    body = lines[start:]
    return body[1:] if body and body[0].startswith("%%") else body

