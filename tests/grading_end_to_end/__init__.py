"""The slow whole-grader suite: real classes graded end to end by ``course``, across many modules.

Every file is marked ``slow_grading``: ``make grading-test`` runs them, ``make test`` and ``make
test-fast`` leave the folder out (``test_browser_formgrader.py`` runs in ``make browser-test``)."""
