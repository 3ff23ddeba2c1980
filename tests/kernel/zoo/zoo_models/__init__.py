"""Models of the kind users keep in their own ``.py`` files, for the model zoo tests (``tests/kernel/zoo``)."""
