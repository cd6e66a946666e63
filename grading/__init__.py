"""The grader: the ``course`` command, on nbgrader, for instructors.

Contract: importing this package, or any of its modules, has no side effects and does not
import torch or ``course_utils`` (the notebooks' helpers); ``course_utils`` never imports
this package. The modules follow the command's verbs, with the machinery by role:

* ``cli``        the ``course`` command (``python -m grading`` is the same);
* ``errors``     ``CourseError``, the base of every error a user is shown as a message
  (``collect.CollectError``, ``release.ReleaseError``, ``lab.workspace.WorkspaceError``, ...);
  it imports nothing, so any module may raise one;
* ``coursedir``  an nbgrader course directory and its configuration, loaded by nbgrader;
* the verbs, one module each, in the order of a term:
  ``release`` (student versions of ``source/``, leak checks), ``collect`` (submissions
  into ``submitted/``), ``autograde`` (a class, in parallel, grades recorded by nbgrader's
  preprocessors), ``feedback`` (HTML by nbgrader, with test results, by the preprocessors of
  ``feedback_preprocessors``), ``export`` (CSV and a Canvas import file), ``validate`` (the
  learner's check before submitting);
* ``pipeline``   one notebook's grading around its execution: the per-assignment recipe built
  once, the copy prepared for the kernel before and made into grades after (on a worker);
* ``record``     nbgrader's gradebook, written by the coordinator in batched transactions;
* ``sanitize``   the notebook that is graded: the learner's own, sanitized as nbgrader does,
  then hardened, against what the instructor's notebook says (``source_notebook``), with
  the grader's own cells put in and taken out (``cells``); ``guard``: the grader's code
  inside the kernel (tamper checks, objects that lie); ``measure``: measured tests, which a
  course's referee decides outside the kernel (notebook 12's speedup);
* ``cluster``    grading on a Dask cluster (``course autograde --scheduler``): a pool with the
  local one's interface, whose tasks carry the submission and run in the same sandbox;
  ``certificates``: the course's own certificate authority for the cluster's mutual TLS
  (``course cluster-certs``);
* ``sandbox/``   where learner code runs: ``protections`` (what isolation this machine
  offers, the limits), ``jail`` (the wrapper every kernel starts through), ``worker``
  (grading worker processes), ``execute`` (one notebook in a jailed kernel), ``rounds``
  (fresh jailed processes for the timed rounds of a measured test), ``cpus`` (a measurement's
  own CPU, and an account of the time other work took from it);
* ``lab/``       the learner's side of the local JupyterLab (``make lab``): ``workspace``
  (copies the student versions into the learner's own folder, as ``nbgrader
  fetch_assignment`` does) and ``validate_button`` (the server extension behind the
  Validate button, which runs ``validate``). Colab learners never install this package.

``course/`` beside these modules is this repository's own nbgrader course directory: its
``nbgrader_config.py``, the generated student versions in ``release/``, and
``capstone_referee.py``, the course's plugin that referees notebook 12's measured test.
"""

__all__: list[str] = []
