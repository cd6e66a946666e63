"""nbgrader configuration of this course directory.

Both plain `nbgrader` (run in this folder, grading/course/) and the `course` command read it: `course` loads
it with nbgrader's own application class, so every nbgrader option set here applies to
`course release`, `autograde`, `feedback` and `export` too (see grading/README.md).
"""

c = get_config()  # noqa: F821

c.CourseDirectory.course_id = "optimization-course"
c.Execute.timeout = 60  # seconds per cell; `course autograde --cell-timeout` overrides it
