"""Maintainers' scripts (README.md, the layout). Each runs as ``python tools/X.py`` (or its make target);
the tests and the site import them as ``tools.X``, with the repository root on ``sys.path``."""
