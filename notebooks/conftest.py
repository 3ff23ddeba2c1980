"""nbval settings for the tutorial notebooks.

Each ``%%xla`` cell's output carries the capture itself under ``application/vnd.xla-lab.capture+json``
(the panel model: every step's timings, start times, graph hashes). nbval compares JSON payloads raw,
without the sanitizer that masks timings and hashes in text, so a fresh run never matches the saved
payload; the same facts are compared through the output's text/plain and text/html, which nbval
sanitizes. (nbval already skips the widget view, whose model id is random.)
"""

CAPTURE_MIME = "application/vnd.xla-lab.capture+json"


def pytest_collection_modifyitems(items):
    for item in items:
        notebook = getattr(item, "parent", None)
        skip = getattr(notebook, "skip_compare", None)
        if skip is not None and CAPTURE_MIME not in skip:
            notebook.skip_compare = tuple(skip) + (CAPTURE_MIME,)
