"""Tests of the maintainers' scripts in ``tools/``."""
