"""Tests of ``grading.cluster``: grading on a Dask cluster, and its safe defaults."""
