"""Unit tests of ``course_utils``: ``tests/course_utils/test_X.py`` tests ``course_utils/X.py``."""
