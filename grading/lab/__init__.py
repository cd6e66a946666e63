"""The learner's side of the local JupyterLab (``make lab``), built on the grader.

* ``workspace``        the learner's own copy of the student versions, kept in step with the
  release without overwriting their work (as ``nbgrader fetch_assignment`` would);
* ``validate_button``  the Jupyter server extension behind the lab's Validate button: it runs
  ``grading.validate``, what ``course validate`` runs.

A learner never imports these in a notebook; Colab learners do not install them (their setup
cell installs ``course_utils`` only). Importing this package has no side effects.
"""

__all__: list[str] = []
