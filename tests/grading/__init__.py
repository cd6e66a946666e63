"""Unit tests of the grader: ``tests/grading/test_X.py`` tests ``grading/X.py``; sub-folders mirror its packages."""
