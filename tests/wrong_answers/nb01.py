"""Notebook 01 (tensors on the GPU): wrong answers of the issue 22/23 review, each caught by the visible tests."""

from __future__ import annotations

from wrong_answers import Wrong

FLOPS = "def matmul_flops(m, n, k):\n"
TIMER = "def time_per_call(fn, sync, repeats, clock=time.perf_counter):\n"
CHOOSE = "def choose_device_type(cuda_available, mps_available):\n"
CALL_ORDER = r"the order of calls should be"
# Exercise 4's visible test says whether the set is right, and names no line number.
NOT_THE_SYNC_SET = r"^SYNC_LINES is not yet the set of lines that make the CPU wait for the GPU: [^0-9]*section 4$"

TIMER_ONE_CALL_TOO_MANY = (
    TIMER
    + "    fn(); sync(); start = clock()\n"
    + "    for _ in range(repeats): fn()\n"
    + "    sync()\n"
    + "    return (clock() - start) / (repeats + 1)  # counts the warm-up as a timed call\n"
)
TIMER_OWN_CLOCK = (
    TIMER
    + "    fn(); sync(); start = time.perf_counter()\n"
    + "    for _ in range(repeats): fn()\n"
    + "    sync()\n"
    + "    return (time.perf_counter() - start) / repeats\n"
)
TIMER_SYNC_EVERY_CALL = (
    TIMER
    + "    fn(); sync(); start = clock()\n"
    + "    for _ in range(repeats):\n"
    + "        fn(); sync()\n"
    + "    return (clock() - start) / repeats\n"
)
TIMER_FIXED_ANSWER = (  # the right calls, then the example's answer: only the hidden tests' other speeds catch it
    TIMER
    + "    fn(); sync(); clock()\n"
    + "    for _ in range(repeats): fn()\n"
    + "    sync(); clock()\n"
    + "    return 0.5\n"
)
TIMER_ALL_CALLS_TIMED = (
    TIMER
    + "    sync(); start = clock()\n"
    + "    for _ in range(repeats + 1): fn()  # the warm-up inside the timing\n"
    + "    sync()\n"
    + "    return (clock() - start) / repeats\n"
)

WRONG = [
    Wrong(
        "01",
        "ex1_matmul_flops",
        "multiplications plus additions",
        FLOPS + "    return m * n * k + m * n * (k - 1)",
        r"matmul_flops\(1, 1, 1\) should be 2, got 1",
        False,
    ),
    Wrong(
        "01",
        "ex1_matmul_flops",
        "returns a tensor",
        FLOPS + "    return torch.tensor(2 * m * n * k)",
        "should be an int, got Tensor",
        False,
    ),
    Wrong(
        "01",
        "ex2_time_per_call",
        "divides by one call too many",
        TIMER_ONE_CALL_TOO_MANY,
        "about 0.5, got 0.375",
        False,
    ),
    Wrong("01", "ex2_time_per_call", "reads its own clock", TIMER_OWN_CLOCK, CALL_ORDER, False),
    Wrong("01", "ex2_time_per_call", "synchronises after every call", TIMER_SYNC_EVERY_CALL, CALL_ORDER, False),
    Wrong("01", "ex2_time_per_call", "times the warm-up too", TIMER_ALL_CALLS_TIMED, CALL_ORDER, False),
    Wrong(
        "01", "ex2_time_per_call", "returns the example's answer", TIMER_FIXED_ANSWER, "should be about 0.25, got 0.5"
    ),
    Wrong(
        "01",
        "ex3_choose_device",
        "returns a torch.device",
        CHOOSE + "    return torch.device('cuda' if cuda_available else 'mps' if mps_available else 'cpu')",
        "should be a str, got device",
        False,
    ),
    Wrong(
        "01",
        "ex3_choose_device",
        "asks torch instead of its arguments",
        CHOOSE
        + "    return 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() else 'cpu'",
        r"choose_device_type\((True|False), (True|False)\) should be '(cuda|mps|cpu)'",
        False,
    ),
    Wrong(
        "01", "ex4_sync_lines", "counts reading the shape", "SYNC_LINES = {4, 5, 7, 9, 10, 11}", NOT_THE_SYNC_SET, False
    ),
    Wrong(
        "01",
        "ex3_choose_device",
        "no CPU fallback",
        CHOOSE + "    if cuda_available:\n        return 'cuda'\n    elif mps_available:\n        return 'mps'",
        r"choose_device_type\(False, False\) should be a str, got NoneType",
        False,
    ),
    Wrong("01", "ex4_sync_lines", "misses the Python if", "SYNC_LINES = {4, 5, 10, 11}", NOT_THE_SYNC_SET, False),
    Wrong(
        "01", "ex4_sync_lines", "counts the queued matmul", "SYNC_LINES = {2, 4, 5, 7, 10, 11}", NOT_THE_SYNC_SET, False
    ),
]
