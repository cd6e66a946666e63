"""The test suite, one package tree that mirrors the code (README.md, "Testing": what to run after a change).

pytest puts the repository root on ``sys.path`` (its rootdir holds conftest.py and no ``__init__.py``),
so the shared helpers import as ``tests.support.X`` and the graded classes as ``tests.fixtures.grading.X``."""
