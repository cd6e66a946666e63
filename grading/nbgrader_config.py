"""nbgrader configuration of the course directory, for plain `nbgrader` commands run in grading/.

The `course` command (course_utils.grading) sets the same values in code (`Course.config()`);
keep the two in step.
"""

c = get_config()  # noqa: F821

c.CourseDirectory.course_id = "optimization-course"
c.Execute.timeout = 60
