"""A ``%%xla`` cell's code as IPython runs a plain cell's: through the shell's input transformations
(``!cmd``, ``x = !cmd``, ``%magic``, ``obj?``, pasted prompts) and AST transformers, as ``%time``
does, with every line number mapped back to the line the user wrote. Tracebacks, the sync hook's
frames and every view then name the user's lines, whatever the transformations did to them (a
``!cmd`` continued over two lines becomes one line; leading blank lines are dropped)."""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from types import CodeType

AWAIT_NOTE = ("top-level 'await' does not run inside a %%xla cell (the cell runs in the kernel's own "
              "event loop): put it in a plain cell, or call asyncio.run(...) on an async function")


@dataclass
class CellCode:
    body: CodeType  # the cell's statements
    value: CodeType | None  # the expression whose value the cell shows (None: nothing to show)


def compile_cell(shell, source: str, filename: str) -> CellCode:
    """The cell compiled as IPython would compile it, the value to show split off as IPython's
    ``ast_node_interactivity`` and a trailing ``;`` decide. Raises SyntaxError at the user's line."""
    tree, text = _parse(shell, source, filename)
    tree = shell.transform_ast(tree) if hasattr(shell, "transform_ast") else tree
    value = _value_node(tree, getattr(shell, "ast_node_interactivity", "last_expr"), text)
    flags = getattr(getattr(shell, "compile", None), "flags", 0)
    body = _compile(tree, filename, "exec", flags)
    expr = None
    if value is not None:
        expr = _compile(ast.Expression(value), filename, "eval", flags)
    return CellCode(body, expr)


def _compile(tree: ast.AST, filename: str, mode: str, flags: int) -> CodeType:
    try:
        return compile(tree, filename, mode, flags=flags, dont_inherit=True)
    except SyntaxError as exc:  # (found past parsing: 'return' or 'await' outside a function)
        if "'await' outside" in str(exc.msg) or "asynchronous comprehension outside" in str(exc.msg):
            exc.msg = AWAIT_NOTE
        raise


def check_syntax(shell, source: str, filename: str | None = None) -> None:
    """Raise the cell's SyntaxError (at the user's line) if its transformed code does not compile."""
    filename = filename or "<xla cell>"
    tree, _ = _parse(shell, source, filename)
    _compile(tree, filename, "exec", getattr(getattr(shell, "compile", None), "flags", 0))


def transform(shell, source: str) -> tuple[str, list[int]]:
    """(the code IPython would run for ``source``, and for each of its lines the user's line number)."""
    text = shell.transform_cell(source) if hasattr(shell, "transform_cell") else source
    return text, line_map(source.splitlines(), text.splitlines())


def line_map(original: list[str], transformed: list[str]) -> list[int]:
    """For each transformed line, the 1-based number of the original line it came from. Lines the
    transformations left alone (up to indentation) match exactly; a rewritten block maps line by line
    onto the code lines of the block it replaced, its extra lines onto the block's last one."""
    a, b = [line.strip() for line in original], [line.strip() for line in transformed]
    if a == b:
        return list(range(1, len(b) + 1))
    mapping = [1] * len(b)
    last = max(len(a), 1)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        # (a rewritten block's code lines, blank ones dropped, e.g. the cell's leading blank lines)
        sources = list(range(i1, i2)) if tag == "equal" else [i for i in range(i1, i2) if a[i]] or [min(i1, i2 - 1)]
        for k, j in enumerate(range(j1, j2)):
            mapping[j] = min(max(sources[min(k, len(sources) - 1)], 0) + 1, last)
    return mapping


def _parse(shell, source: str, filename: str) -> tuple[ast.Module, str]:
    """The transformed cell parsed, its line numbers the user's."""
    try:
        text, lines = transform(shell, source)
    except SyntaxError as exc:  # (a transformation that tokenizes the cell can fail first)
        _at_user_line(exc, source, None, None)
        raise
    compiler = getattr(shell, "compile", None)
    try:
        if compiler is not None and hasattr(compiler, "ast_parse"):
            tree = compiler.ast_parse(text, filename=filename)
        else:
            tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        _at_user_line(exc, source, lines, text)
        exc.filename = filename
        raise
    _remap(tree, lines, source.splitlines(), text.splitlines())
    return tree, text


def _at_user_line(exc: SyntaxError, source: str, lines: list[int] | None, text: str | None) -> None:
    """Move a SyntaxError from the transformed code's coordinates to the user's line."""
    if exc.lineno is None or lines is None or not 1 <= exc.lineno <= len(lines):
        return
    original = source.splitlines()
    transformed = (text or "").splitlines()
    at = exc.lineno
    exc.lineno = lines[at - 1]
    if exc.end_lineno is not None and 1 <= exc.end_lineno <= len(lines):
        exc.end_lineno = lines[exc.end_lineno - 1]
    user_line = original[exc.lineno - 1] if exc.lineno <= len(original) else ""
    if transformed[at - 1].strip() != user_line.strip():  # a rewritten line: its columns are not the user's
        exc.offset = len(user_line) - len(user_line.lstrip()) + 1
        exc.end_offset = None
    exc.text = user_line + "\n"


def _remap(tree: ast.AST, lines: list[int], original: list[str], transformed: list[str]) -> None:
    """Every node's line numbers to the user's lines; on a rewritten line the node spans the user's
    line (its columns in the rewritten text mean nothing there)."""
    if lines == list(range(1, len(lines) + 1)) and all(
            a.strip() == b.strip() for a, b in zip(original, transformed)):
        return  # (nothing moved: the common case)
    rewritten = [t.strip() != (original[n - 1].strip() if n <= len(original) else None)
                 for t, n in zip(transformed, lines)]

    def span(n: int) -> tuple[int, int]:
        text = original[n - 1] if 1 <= n <= len(original) else ""
        return len(text.encode()) - len(text.lstrip().encode()), len(text.rstrip().encode())

    for node in ast.walk(tree):
        start = getattr(node, "lineno", None)
        if start is None or not 1 <= start <= len(lines):
            continue
        end = getattr(node, "end_lineno", None) or start
        end = min(max(end, start), len(lines))
        node.lineno, node.end_lineno = lines[start - 1], lines[end - 1]
        if rewritten[start - 1] and hasattr(node, "col_offset"):
            node.col_offset = span(node.lineno)[0]
        if rewritten[end - 1] and getattr(node, "end_col_offset", None) is not None:
            node.end_col_offset = span(node.end_lineno)[1]
        if node.lineno == node.end_lineno and getattr(node, "end_col_offset", None) is not None \
                and node.end_col_offset < node.col_offset:
            node.end_col_offset = node.col_offset


def _value_node(tree: ast.Module, interactivity: str, text: str) -> ast.expr | None:
    """The expression whose value a plain cell would show, taken off the cell's statements: the last
    expression statement (``last_expr``, IPython's default; ``all`` shows at least that one), or the
    last assignment's name (``last_expr_or_assign``); none after a trailing ``;`` or with ``none``."""
    if not tree.body or interactivity == "none" or _ends_with_semicolon(text):
        return None
    last = tree.body[-1]
    if isinstance(last, ast.Expr):
        tree.body.pop()
        return last.value
    if interactivity == "last_expr_or_assign":
        target = None
        if isinstance(last, ast.Assign) and len(last.targets) == 1:
            target = last.targets[0]
        elif isinstance(last, (ast.AugAssign, ast.AnnAssign)) and last.value is not None:
            target = last.target
        if isinstance(target, ast.Name):
            return ast.copy_location(ast.Name(target.id, ast.Load()), last)
    return None


def _ends_with_semicolon(text: str) -> bool:
    from IPython.core.displayhook import DisplayHook

    try:
        return bool(DisplayHook.semicolon_at_end_of_expression(text))
    except Exception:  # (tokenize: the code parsed, so this is only a guard)
        return False
