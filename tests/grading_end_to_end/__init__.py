"""The slow whole-grader suite: real classes graded end to end by ``course``, across many modules.

Most of it is marked ``slow_grading`` (``make grading-test``); ``make test-fast`` leaves the folder out."""
