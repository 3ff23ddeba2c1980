"""Long sessions: the artifact store's caps, read from the environment (the store at work, and the
rest of reliability, are in tests/kernel/test_reliability.py)."""


def test_store_caps_come_from_the_environment(monkeypatch):
    from xla_lab import settings
    from xla_lab.capture.store import ArtifactStore

    try:
        monkeypatch.setenv("XLA_LAB_MAX_GRAPHS", "7")
        monkeypatch.setenv("XLA_LAB_MAX_GRAPH_MB", "3")
        settings.reload()  # (read once, when xla_lab loads: the test reads them again)
        store = ArtifactStore()
        assert store.max_graphs == 7 and store.max_bytes == 3 << 20
        monkeypatch.setenv("XLA_LAB_MAX_GRAPHS", "not a number")
        settings.reload()
        assert ArtifactStore().max_graphs == 200
    finally:
        monkeypatch.undo()
        settings.reload()
