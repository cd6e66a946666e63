"""Instructor grading pipeline on nbgrader: release, collect, autograde, feedback, export.

Contract: importing this package has no side effects. Each module has one job:

* ``course``    where the nbgrader course directory (``grading/``) keeps what;
* ``release``   student versions of ``notebooks/`` in ``grading/release/`` (and leak checks);
* ``collect``   submissions from a folder or an LMS zip into ``submitted/<student>/<assignment>/``;
* ``rebuild``   the notebook that is graded: the source with only the learner's answers taken;
* ``sandbox``   which protections this machine offers, limits, and the kernel jail command;
* ``jail``      the tiny wrapper that applies them and execs the kernel;
* ``execute``   runs one rebuilt notebook in a jailed kernel (timeouts, output caps, restarts);
* ``guard``     the grader's own cells that detect patched comparison functions;
* ``autograde`` grades a class in parallel and writes the gradebook from one process;
* ``report``    HTML feedback and CSV export; ``validate`` is the learner's pre-submission check;
* ``cli``       the ``course`` command.
"""

__all__: list[str] = []
