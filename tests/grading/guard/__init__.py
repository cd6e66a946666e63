"""Tests of ``grading.guard``, the guard around every graded test cell."""
