"""Tests of ``grading.lab``: the learner's workspace."""
