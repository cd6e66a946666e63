"""Tests of ``course_utils.capstone``, notebook 12's task, loops and referee."""
