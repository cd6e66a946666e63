"""Tests of ``grading.sandbox``: the jail, kernels, CPUs and CPU time, hidden-test leaks."""
