"""Notebook 01 (tensors on the GPU): every wrong answer, caught by the visible tests unless hidden (exercise 4)."""

from __future__ import annotations

from tests.wrong_answers import Wrong

FLOPS = "def matmul_flops(m, n, k):\n"
TIMER = "def time_per_call(fn, sync, repeats, clock=time.perf_counter):\n"
CHOOSE = "def choose_device_type(cuda_available, mps_available):\n"
CALL_ORDER = r"the order of calls should be"
# Exercise 4's visible test settles lines 3, 9 and 11 only; the hidden tests name one wrong line of the others.
NOT_THE_SYNC_SET = r"^SYNC_LINES has \d+ wrong lines?"
LINE_3 = r"^line 3 \(`total = y\.sum\(\)`\) only queues a reduction"
LINE_9 = r"^line 9 reads `w\.shape`"
LINE_11 = r"^line 11 calls `\.item\(\)`"

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

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
TIMED_LOOP = "    for _ in range(repeats): fn()\n"


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
    Wrong("01", "ex4_sync_lines", "counts reading the shape", "SYNC_LINES = {4, 5, 7, 9, 10, 11}", LINE_9, False),
    Wrong(
        "01",
        "ex3_choose_device",
        "no CPU fallback",
        CHOOSE + "    if cuda_available:\n        return 'cuda'\n    elif mps_available:\n        return 'mps'",
        r"choose_device_type\(False, False\) should be a str, got NoneType",
        False,
    ),
    Wrong("01", "ex4_sync_lines", "misses the Python if", "SYNC_LINES = {4, 5, 10, 11}", NOT_THE_SYNC_SET, True),
    Wrong(
        "01", "ex4_sync_lines", "counts the queued matmul", "SYNC_LINES = {2, 4, 5, 7, 10, 11}", NOT_THE_SYNC_SET, True
    ),
    Wrong("01", "ex1_matmul_flops", "one FLOP per multiply-add", FLOPS + "    return m * n * k", "2, got 1", False),
    Wrong("01", "ex1_matmul_flops", "counts the outputs", FLOPS + "    return 2 * m * n", "48, got 12", False),
    Wrong("01", "ex1_matmul_flops", "returns a float", FLOPS + "    return 2.0 * m * n * k", "should be an int", False),
    Wrong(
        "01",
        "ex2_time_per_call",
        "no warm-up call",
        TIMER + "    sync(); start = clock()\n" + TIMED_LOOP + "    sync()\n    return (clock() - start) / repeats",
        CALL_ORDER,
        False,
    ),
    Wrong(
        "01",
        "ex2_time_per_call",
        "reads the clock before synchronising",
        TIMER + "    fn(); start = clock()\n" + TIMED_LOOP + "    sync()\n    return (clock() - start) / repeats",
        CALL_ORDER,
        False,
    ),
    Wrong(
        "01",
        "ex2_time_per_call",
        "no sync after the timed calls",
        TIMER + "    fn(); sync(); start = clock()\n" + TIMED_LOOP + "    return (clock() - start) / repeats",
        CALL_ORDER,
        False,
    ),
    Wrong(
        "01",
        "ex2_time_per_call",
        "returns the total",
        TIMER + "    fn(); sync(); start = clock()\n" + TIMED_LOOP + "    sync()\n    return clock() - start",
        "seconds per call should be about 0.5, got 1.5",
        False,
    ),
    # The statement names all four cases, so the visible tests catch these two.
    Wrong(
        "01",
        "ex3_choose_device",
        "prefers MPS to CUDA",
        CHOOSE + "    if mps_available: return 'mps'\n    return 'cuda' if cuda_available else 'cpu'",
        r"choose_device_type\(True, True\) should be 'cuda'",
        False,
    ),
    Wrong(
        "01",
        "ex3_choose_device",
        "ignores MPS",
        CHOOSE + "    return 'cuda' if cuda_available else 'cpu'",
        r"choose_device_type\(False, True\) should be 'mps'",
        False,
    ),
    Wrong(
        "01", "ex4_sync_lines", "misses the boolean-mask index", "SYNC_LINES = {4, 7, 10, 11}", NOT_THE_SYNC_SET, True
    ),
    Wrong(
        "01",
        "ex4_sync_lines",
        "a queued reduction as a sync",
        "SYNC_LINES = {3, 4, 5, 7, 10, 11}",
        LINE_3,
        False,
    ),
    Wrong(
        "01",
        "ex4_sync_lines",
        "the no-op non_blocking move",
        "SYNC_LINES = {4, 5, 7, 10, 11, 12}",
        NOT_THE_SYNC_SET,
        True,
    ),
    Wrong("01", "ex4_sync_lines", "a list", "SYNC_LINES = [4, 5, 7, 10, 11]", "should be a set, got list", False),
    # Validate settles lines 3, 9 and 11; a wrong answer elsewhere is told one wrong line by the hidden tests.
    Wrong(
        "01",
        "ex4_sync_lines",
        "the first five lines",
        "SYNC_LINES = {1, 2, 3, 4, 5}",
        LINE_3,
        False,
    ),
    Wrong(
        "01",
        "ex4_sync_lines",
        "only the explicit reads",
        "SYNC_LINES = {4, 10, 11}",
        NOT_THE_SYNC_SET,
        True,
    ),
    Wrong("01", "ex4_sync_lines", "misses the .item()", "SYNC_LINES = {4, 5, 7, 10}", LINE_11, False),
    Wrong("01", "ex4_sync_lines", "every line that touches y", "SYNC_LINES = {2, 3, 4, 5, 6}", LINE_3, False),
]
