"""``%xla status`` and ``%xla history`` as text: what the session holds, rendered from its state."""

from __future__ import annotations

from xla_lab.compat import known_differences, unsupported


def status_text(session, versions) -> str:
    """``versions``: ``compat.Versions`` of the framework this kernel runs."""
    rt = session.runtime
    lines = ["xla_lab status"]
    for what, version in versions.rows():
        lines.append(f"  {what:<40} {version}")
    for what, state in rt.describe():
        lines.append(f"  {what:<40} {state}")
    lines.append(f"  {'captured cells':<40} {len(session.history)}")
    store = session.store
    cap = (f"cap {store.max_graphs or 'none'} graphs / "
           f"{f'{store.max_bytes >> 20} MiB' if store.max_bytes else 'no byte cap'} (XLA_LAB_MAX_GRAPHS, XLA_LAB_MAX_GRAPH_MB)")
    lines.append(f"  {'distinct graphs stored':<40} {len(store)} ({cap})")
    lines.append(f"  {'dump directory size':<40} {session.dumps.size_bytes()} bytes")
    panels = session.panels
    lines.append(f"  {'live panel widgets':<40} {len(panels)} (cap {panels.cap or 'none'}, XLA_LAB_MAX_PANELS)")
    lines.append(f"  {'saved %%xla outputs keep':<40} {getattr(session, 'save', 'full')} (%xla save, XLA_LAB_SAVE)")
    outside = unsupported(versions.torch_xla)
    for p in rt.problems + ([outside] if outside else []):
        lines.append(f"  ! {p}")
    for note in known_differences(versions.torch_xla):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def history_text(session) -> str:
    if not session.history:
        return "xla_lab: no %%xla cell has run yet."
    lines = [f"{'#':>3} {'cell':>6} {'name':<16} {'steps':>6} {'compiled':>8} {'hits':>6} {'precomp':>7} "
             f"{'compile s':>10}"]
    if session.dropped_history:
        lines.append(f"    ({session.dropped_history} older captures dropped: XLA_LAB_MAX_HISTORY keeps "
                     f"the last {session.max_history})")
    for i, c in enumerate(session.history):
        cell = f"[{c.execution_count}]" if c.execution_count is not None else ""
        lines.append(f"{i:>3} {cell:>6} {(c.graph_name or '')[:16]:<16} {len(c.steps):>6} "
                     f"{c.compiles:>8} {c.cache_hits:>6} {c.precompiled:>7} {c.total('compile_s'):>10.3f}"
                     + ("  (raised)" if c.error else ""))
    return "\n".join(lines)
