"""Helpers shared by the test modules (a module of its own: ``conftest`` is not importable by name
when notebooks/ has a conftest too)."""


def run_xla(ip, body: str, options: str = ""):
    """Run a %%xla cell the way a notebook would; return (result, capture)."""
    import xla_lab

    before = len(xla_lab.history())
    result = ip.run_cell(f"%%xla {options}\n{body}")
    after = xla_lab.history()
    capture = after[-1] if len(after) > before else None
    return result, capture
