"""``python -m course_utils.grading`` is the ``course`` command."""

from course_utils.grading.cli import main

raise SystemExit(main())
