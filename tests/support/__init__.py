"""Helpers the tests share (no tests here): notebooks and cells, processes, a Dask cluster, PostgreSQL, Chromium."""
