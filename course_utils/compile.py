"""Check that ``torch.compile``'s default backend, Inductor, can generate code here, and read its logs.

Contract: nothing happens at import, and nothing here raises for a missing tool. Inductor
turns captured graphs into Triton kernels on CUDA GPUs and into C++/OpenMP code on CPUs,
which it builds with a C++ compiler. ``find_cpp_compiler`` looks for that compiler the way
Inductor does on Linux and macOS (``torch/_inductor/cpp_builder.py``,
``cpp_compiler_search``: each entry of ``torch._inductor.config.cpp.cxx``, that is ``$CXX``
if set, else ``g++``, or ``clang++`` on macOS, is run with ``--version``) and returns
``None`` instead of raising. ``inductor_status`` says whether Inductor can compile for a
device and, if it cannot, what to install and which backend to use meanwhile
(``aot_eager``: captures and traces like Inductor, generates no code). On a CPU it also
runs Inductor's one-off probe of the vector instructions (a few C++ builds, cached on
disk in Inductor's cache directory), so that the first compile you time does not include it.
While nbgrader grades or validates a notebook (it sets ``NBGRADER_EXECUTION``, see its FAQ)
the answer is the fallback backend, without any probe: the tests need no generated code,
and the course's grader gives every kernel an empty ``/tmp``, so Inductor would rebuild
every kernel (and redo the probe) for every submission.
``torch_log_warnings`` collects what torch's own loggers report at warning level inside a
block (a graph break's hint, the recompile limit being hit) instead of letting it reach
stderr as log lines, so that a notebook prints what was reported as part of the lesson.
``count_inductor_kernels`` counts what the code Inductor generates inside a block calls: the
kernels of a library (cuBLAS or oneDNN matrix products, Inductor's "extern" calls) and the
kernels Inductor generated itself (Triton or C++), compiling in a fresh, empty cache so that
nothing is loaded instead of generated.
First written out in notebook 11 ("Fuse and compile with torch.compile").
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch

__all__ = [
    "FALLBACK_BACKEND",
    "InductorStatus",
    "KernelCounts",
    "count_inductor_kernels",
    "find_cpp_compiler",
    "inductor_status",
    "install_hint",
    "torch_log_warnings",
]

FALLBACK_BACKEND = "aot_eager"
"""Where Inductor cannot generate code: the same capture and autograd tracing, eager kernels."""


@dataclass(frozen=True)
class InductorStatus:
    """Whether the notebook should compile with Inductor here, and what to use instead."""

    ready: bool
    """True when ``backend`` is ``"inductor"``."""
    backend: str
    """``"inductor"`` when ready, else ``FALLBACK_BACKEND``."""
    message: str

    def __str__(self) -> str:
        return self.message


def _inductor_compiler_candidates() -> tuple[str, ...]:
    """The compilers Inductor tries, in order (its conda download, ``None``, left out)."""
    if sys.platform == "win32":
        return (os.environ.get("CXX", "cl"),)
    from torch._inductor import config

    cxx = config.cpp.cxx
    candidates = cxx if isinstance(cxx, (list, tuple)) else (cxx,)
    return tuple(c for c in candidates if c)


def find_cpp_compiler(candidates: Iterable[str] | None = None) -> str | None:
    """The first C++ compiler in ``candidates`` that runs, or ``None``.

    ``candidates`` defaults to the ones Inductor itself tries. A candidate counts if
    ``<candidate> --version`` exits with status 0 (on Windows, if it is on ``PATH``: MSVC's
    ``cl`` has no ``--version``).

    >>> find_cpp_compiler(["no-such-compiler-here"]) is None
    True
    """
    for cxx in _inductor_compiler_candidates() if candidates is None else candidates:
        if sys.platform == "win32":
            if shutil.which(cxx):
                return cxx
            continue
        try:
            subprocess.run([cxx, "--version"], capture_output=True, check=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        return cxx
    return None


def install_hint(platform: str | None = None) -> str:
    """How to get a C++ compiler that Inductor can use, for ``sys.platform`` values.

    >>> "xcode-select --install" in install_hint("darwin")
    True
    """
    platform = sys.platform if platform is None else platform
    if platform == "darwin":
        return "install Apple's command line tools: xcode-select --install"
    if platform == "win32":
        return (
            "install Visual Studio Build Tools (the 'Desktop development with C++' workload) "
            "and start Python from a 'Developer Command Prompt', so that cl.exe is on PATH"
        )
    return (
        "install g++: sudo apt-get install g++ (Debian, Ubuntu), sudo dnf install gcc-c++ "
        "(Fedora), or conda install -c conda-forge gxx; or point the CXX environment variable "
        "at another C++ compiler before starting Python"
    )


def _vector_isa() -> str:
    """The CPU vector instructions Inductor will generate code for (runs its build probe)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    try:
        isa = str(pick_vec_isa())
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        return f"unknown ({type(error).__name__})"
    return isa or "none (scalar code)"


def _has_triton() -> bool:
    from torch.utils._triton import has_triton

    return has_triton()


def inductor_status(
    device: torch.device | str,
    *,
    find_compiler: Callable[[], str | None] = find_cpp_compiler,
    has_triton: Callable[[], bool] = _has_triton,
    vector_isa: Callable[[], str] = _vector_isa,
    environ: Mapping[str, str] = os.environ,
) -> InductorStatus:
    """Can Inductor generate code for ``device``? Says why not and what to install.

    The keyword arguments replace the checks and the environment (tests pass fakes).

    >>> inductor_status("cpu", find_compiler=lambda: None, environ={}).backend
    'aot_eager'
    """
    grading = environ.get("NBGRADER_EXECUTION")
    if grading:
        return InductorStatus(
            False,
            FALLBACK_BACKEND,
            f"nbgrader is running this notebook (NBGRADER_EXECUTION={grading}): the demonstrations use "
            f"backend={FALLBACK_BACKEND!r}, which generates no code, so that grading stays fast. "
            "Their timings are not Inductor's: run the notebook yourself to see those.",
        )
    kind = torch.device(device).type
    if kind in {"cuda", "xpu"}:
        if has_triton():
            return InductorStatus(True, "inductor", f"Inductor generates Triton kernels for this {kind} device.")
        return InductorStatus(
            False,
            FALLBACK_BACKEND,
            f"Inductor needs Triton for {kind} devices and it is not installed (pip install triton; "
            f"PyTorch's Linux CUDA wheels bring it). Using backend={FALLBACK_BACKEND!r} meanwhile: "
            "it captures graphs but generates no kernels, so compiled code runs at eager speed.",
        )
    if kind == "mps":
        message = "Inductor generates Metal kernels for Apple GPUs (early support in these torch versions)."
        return InductorStatus(True, "inductor", message)
    compiler = find_compiler()
    if compiler is None:
        return InductorStatus(
            False,
            FALLBACK_BACKEND,
            "No C++ compiler found: Inductor builds its CPU kernels with one (it tries $CXX, else g++, "
            f"or clang++ on macOS). To fix: {install_hint()}. Using backend={FALLBACK_BACKEND!r} meanwhile: "
            "it captures graphs but generates no kernels, so compiled code runs at eager speed.",
        )
    return InductorStatus(
        True,
        "inductor",
        f"Inductor generates C++/OpenMP kernels for this CPU, built with {shutil.which(compiler) or compiler}; "
        f"vector instructions: {vector_isa()}.",
    )


def _summary(message: str) -> str:
    """A log message's first line, joined with the next one when the first ends in a colon."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return f"{lines[0]} {lines[1]}"
    return lines[0] if lines else ""


@contextmanager
def torch_log_warnings(level: int = logging.WARNING) -> Iterator[list[str]]:
    """Inside the block, keep torch's log records at ``level`` or above off stderr and collect them.

    ``torch.compile`` reports some events only in its logs (the hint after a graph break
    on ``.item()``, the recompile limit being hit). Each such record is dropped by the
    handlers it would reach and summarised (its first line, or first two when the first
    ends in a colon) in the yielded list. Records below ``level``, such as the
    ``recompiles`` logs that ``torch._logging.set_logs`` switches on, pass unchanged, and
    nothing changes outside the block.

    >>> with torch_log_warnings() as logged:
    ...     logging.getLogger("torch._dynamo").warning("hit config.recompile_limit (3)\\n  function: f")
    >>> logged
    ['hit config.recompile_limit (3)']
    """
    messages: list[str] = []
    seen: set[int] = set()

    def collect(record: logging.LogRecord) -> bool:
        if record.levelno < level or not record.name.startswith("torch"):
            return True
        if id(record) not in seen:
            seen.add(id(record))
            messages.append(_summary(record.getMessage()))
        return False

    names = [name for name in list(logging.root.manager.loggerDict) if name == "torch" or name.startswith("torch.")]
    handlers = {handler for name in names for handler in logging.getLogger(name).handlers}
    handlers.update(logging.getLogger().handlers)
    if logging.lastResort is not None:  # where records go when no handler is configured
        handlers.add(logging.lastResort)
    for handler in handlers:
        handler.addFilter(collect)
    try:
        yield messages
    finally:
        for handler in handlers:
            handler.removeFilter(collect)


@dataclass
class KernelCounts:
    """What the code Inductor generated calls, summed over the graphs compiled in a block."""

    library_calls: int = 0
    """Calls to kernels of a library (Inductor's "extern" calls: cuBLAS or oneDNN matrix products)."""
    generated: int = 0
    """Kernels Inductor generated itself: Triton kernels on a GPU, C++ loops on a CPU."""


@contextmanager
def count_inductor_kernels() -> Iterator[KernelCounts]:
    """Count the kernels that the code Inductor generates inside the block calls; filled when the block ends.

    The counts come from Inductor's own bookkeeping while it generates code:
    ``counters["inductor"]["extern_calls"]`` (one per call to a library kernel, in
    ``Scheduler.codegen_extern_call``) and ``torch._inductor.metrics.generated_kernel_count``.
    A graph found in Inductor's on-disk caches is loaded instead of generated and would count
    nothing, so the block runs in ``torch._inductor.utils.fresh_cache()``: a new, empty cache
    folder, deleted at the end. Compile and call the model inside the block (Inductor generates
    code at the first call); what was compiled there keeps working after it. Counts assume
    Inductor's default Python wrapper: with ``cpp_wrapper`` it generates code twice and resets
    its metrics in between.
    """
    from torch._dynamo.utils import counters
    from torch._inductor import metrics
    from torch._inductor.utils import fresh_cache

    counts = KernelCounts()
    library_before, generated_before = counters["inductor"]["extern_calls"], metrics.generated_kernel_count
    with fresh_cache():
        yield counts
    counts.library_calls = counters["inductor"]["extern_calls"] - library_before
    counts.generated = metrics.generated_kernel_count - generated_before
