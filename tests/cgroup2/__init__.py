"""The kernel's cgroup v2 mechanisms that issue 29's grader backend needs, tried where only cgroup v2 is mounted.

These tests run inside the virtual machine of ``tools/cgroup2_vm.py`` (``make grading-test-cgroup2``),
with plain Python only; anywhere else ``conftest.py`` skips them.
"""
