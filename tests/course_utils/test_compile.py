"""Unit tests for course_utils.compile: finding Inductor's C++ compiler and reporting it."""

from __future__ import annotations

import logging
import os
import stat
import sys

import pytest
import torch

from course_utils import MLP
from course_utils.compile import (
    FALLBACK_BACKEND,
    count_inductor_kernels,
    find_cpp_compiler,
    inductor_status,
    install_hint,
    torch_log_warnings,
)

unix_only = pytest.mark.skipif(sys.platform == "win32", reason="fake compilers are shell scripts")


def _fake_compiler(directory, name: str, exit_status: int) -> str:
    path = directory / name
    path.write_text(f"#!/bin/sh\necho 'fake c++ 1.0'\nexit {exit_status}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@unix_only
def test_find_returns_the_first_candidate_that_runs(tmp_path):
    broken = _fake_compiler(tmp_path, "broken-c++", 1)
    working = _fake_compiler(tmp_path, "working-c++", 0)
    assert find_cpp_compiler([str(tmp_path / "missing-c++"), broken, working]) == working


@unix_only
def test_find_returns_none_when_nothing_runs(tmp_path):
    assert find_cpp_compiler([str(tmp_path / "missing-c++"), _fake_compiler(tmp_path, "broken", 2)]) is None
    assert find_cpp_compiler([]) is None


@unix_only
def test_default_candidates_follow_inductor_config(tmp_path):
    """With no candidates given, the search reads torch._inductor.config.cpp.cxx, as Inductor does."""
    from torch._inductor import config

    working = _fake_compiler(tmp_path, "configured-c++", 0)
    with config.patch({"cpp.cxx": (None, working)}):
        assert find_cpp_compiler() == working
    with config.patch({"cpp.cxx": (None, str(tmp_path / "absent"))}):
        assert find_cpp_compiler() is None


def test_missing_compiler_falls_back_and_says_what_to_install():
    status = inductor_status("cpu", find_compiler=lambda: None, vector_isa=lambda: pytest.fail("no probe"), environ={})
    assert not status.ready
    assert status.backend == FALLBACK_BACKEND == "aot_eager"
    assert "No C++ compiler found" in str(status)
    assert install_hint() in status.message


def test_cpu_with_a_compiler_reports_it_and_the_vector_instructions():
    status = inductor_status("cpu", find_compiler=lambda: "fake-c++", vector_isa=lambda: "avx2", environ={})
    assert status.ready and status.backend == "inductor"
    assert "fake-c++" in status.message and "avx2" in status.message


@pytest.mark.parametrize("kind", ["cuda", "xpu"])
def test_gpu_needs_triton(kind):
    never = lambda: pytest.fail("a GPU needs no C++ compiler check")  # noqa: E731
    ready = inductor_status(kind, has_triton=lambda: True, find_compiler=never, environ={})
    assert ready.ready and ready.backend == "inductor" and "Triton" in ready.message
    missing = inductor_status(kind, has_triton=lambda: False, find_compiler=never, environ={})
    assert not missing.ready and missing.backend == FALLBACK_BACKEND
    assert "pip install triton" in missing.message


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("mode", ["autograde", "validate"])
def test_under_nbgrader_the_fallback_is_used_without_any_check(device, mode):
    never = lambda: pytest.fail("grading needs no compiler, Triton or vector probe")  # noqa: E731
    status = inductor_status(
        device, find_compiler=never, has_triton=never, vector_isa=never, environ={"NBGRADER_EXECUTION": mode}
    )
    assert not status.ready and status.backend == FALLBACK_BACKEND
    assert f"NBGRADER_EXECUTION={mode}" in status.message


def test_install_hints_name_each_platform_tool():
    assert "apt-get install g++" in install_hint("linux")
    assert "xcode-select --install" in install_hint("darwin")
    assert "Visual Studio Build Tools" in install_hint("win32")


@pytest.mark.skipif(os.environ.get("CXX") is not None, reason="CXX overrides the default compiler")
@unix_only
def test_this_machine_matches_inductors_own_search():
    """Our search and Inductor's agree on this machine (Inductor raises where we return None)."""
    from torch._inductor import cpp_builder, exc

    ours = find_cpp_compiler()
    try:
        theirs = cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        theirs = None
    assert ours == theirs


def test_torch_log_warnings_collects_the_recompile_limit_warning_instead_of_printing_it(capfd):
    def double(x):
        return x * 2

    torch.compiler.reset()
    with torch_log_warnings() as logged, torch._dynamo.config.patch(recompile_limit=1):
        compiled = torch.compile(double, backend="eager", dynamic=False)
        for n in (2, 3, 4):
            compiled(torch.ones(n))
    torch.compiler.reset()
    assert any("recompile_limit (1)" in message for message in logged), logged
    assert "recompile_limit" not in capfd.readouterr().err


def test_torch_log_warnings_passes_lower_levels_and_other_loggers():
    received: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: received.append(record.getMessage())
    torch_logger, other_logger = logging.getLogger("torch._course_test"), logging.getLogger("course_test.other")
    for logger in (torch_logger, other_logger):
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        with torch_log_warnings() as logged:
            torch_logger.info("an info record")
            other_logger.warning("not torch's")
            torch_logger.error("first line:\n  second line\n  third")
        torch_logger.warning("after the block")
    finally:
        for logger in (torch_logger, other_logger):
            logger.removeHandler(handler)
    assert logged == ["first line: second line"]
    assert received == ["an info record", "not torch's", "after the block"]


@pytest.mark.slow
def test_count_inductor_kernels_counts_library_calls_and_generated_kernels_of_a_compiled_mlp():
    """Linear, ReLU, Linear on a CPU: an addmm call to the library per Linear, one generated loop for the ReLU."""
    status = inductor_status("cpu", environ={})  # also runs the vector probe now, in the usual cache, once
    if not status.ready:
        pytest.skip(status.message)
    torch.compiler.reset()
    torch.manual_seed(0)
    model, x = MLP(8, 2, hidden=8, depth=1).eval(), torch.randn(4, 8)
    with torch.no_grad():
        with count_inductor_kernels() as counts:
            compiled = torch.compile(model, backend="inductor")
            compiled(x)
        assert (counts.library_calls, counts.generated) == (2, 1)
        torch.testing.assert_close(compiled(x), model(x))  # still runs once its cache folder is gone
        with count_inductor_kernels() as again:  # nothing compiled in this block
            compiled(x)
    torch.compiler.reset()
    assert (again.library_calls, again.generated) == (0, 0)
