"""Instructor grading pipeline on nbgrader: release, collect, autograde, feedback, export, validate.

Contract: importing this package has no side effects. Each module has one job:

* ``course``    an nbgrader course directory and its configuration, loaded by nbgrader;
* ``release``   student versions of ``source/`` (and of ``notebooks/`` for this repository's course), leak checks;
* ``collect``   submissions from nbgrader's ``submitted/`` layout, a folder or an LMS zip into ``submitted/``;
* ``sanitize``  the notebook that is graded: the learner's own, sanitized as nbgrader does, then hardened;
* ``sandbox``   which protections this machine offers, limits, and the kernel jail command;
* ``jail``      the tiny wrapper that applies them and execs the kernel;
* ``execute``   runs one prepared notebook in a jailed kernel (timeouts, output caps, restarts);
* ``guard``     the grader's code inside the kernel: tamper checks and objects that lie;
* ``worker``    grading worker processes;
* ``autograde`` grades a class in parallel, recording grades with nbgrader's preprocessors;
* ``feedback``  HTML feedback by nbgrader, with test results and optionally without hidden tests;
* ``export``    grades as CSV and as a Canvas gradebook import file;
* ``validate``  the learner's check before submitting;
* ``cli``       the ``course`` command.
"""

__all__: list[str] = []
