"""cgroup v2, tried where only it is mounted: the kernel's mechanisms (``test_mechanisms``), the grader's placement.

These tests run inside the virtual machine of ``tools/cgroup2_vm.py`` (``make grading-test-cgroup2``),
with plain Python only; anywhere else ``conftest.py`` skips them.
"""
