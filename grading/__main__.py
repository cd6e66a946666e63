"""``python -m grading`` is the ``course`` command."""

from grading.cli import main

raise SystemExit(main())
