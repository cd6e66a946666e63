"""Wrong answers to notebook 10's exercises that its visible tests reject (issues 22 and 23).

Each is an answer a learner would write: a label opened inside another, the loss read on the
host (``.item()``, ``float()``, ``print``, an ``if``), the last cycle's end off by one, the
directory itself passed as the trace's path, a name matched as a substring.
"""

from __future__ import annotations

from tests.wrong_answers import Wrong

_STEP = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
    with record_function(f"{prefix}/backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with record_function(f"{prefix}/optimizer"):
        optimizer.step()
"""

# Issue 22, section 2: every label nested inside prefix/forward, and the loss read with .item().
NESTED_LABELS_AND_ITEM = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
        with record_function(f"{prefix}/backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            with record_function(f"{prefix}/optimizer"):
                optimizer.step()
    return torch.tensor(loss.item())
"""
NESTED_LABELS = NESTED_LABELS_AND_ITEM.replace("torch.tensor(loss.item())", "loss.detach()")
OPTIMIZER_INSIDE_BACKWARD = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
    with record_function(f"{prefix}/backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        with record_function(f"{prefix}/optimizer"):
            optimizer.step()
    return loss.detach()
"""
LOSS_BY_ITEM = _STEP + "    return torch.tensor(loss.item())\n"
LOSS_BY_FLOAT = _STEP + "    return torch.tensor(float(loss))\n"
LOSS_PRINTED = _STEP + '    print(f"loss {loss:.4f}")\n    return loss.detach()\n'
STEP_IF_FINITE = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
    with record_function(f"{prefix}/backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with record_function(f"{prefix}/optimizer"):
        if torch.isfinite(loss):
            optimizer.step()
    return loss.detach()
"""
STEPS_PAST_THE_LAST_CYCLE = """
def recorded_steps(wait, warmup, active, repeat, skip_first, num_steps):
    cycle = wait + warmup + active
    steps = []
    for step in range(skip_first, num_steps):
        position = step - skip_first
        if repeat > 0 and position > repeat * cycle:
            break
        if position % cycle >= wait + warmup:
            steps.append(step)
    return steps
"""
TRACE_AT_THE_DIRECTORY = """
def export_and_load(prof, directory):
    prof.export_chrome_trace(directory)
    with open(directory, encoding="utf-8") as file:
        return json.load(file)
"""
STATS_BY_SUBSTRING = """
def event_stats(trace, name):
    durations = [
        e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and name in e.get("name", "") and "dur" in e
    ]
    return len(durations), float(sum(durations)) / 1e3
"""
HOST_READ = r"labelled_step read a tensor on the host.*the code called torch\."
NESTED = r"'step/(backward|optimizer)' runs inside 'step/(forward|backward)'"

# Moved from tests/notebooks/test_wrong_answers.py (the earlier review lists).
STEPS_FROM_SCHEDULE = """
def recorded_steps(wait, warmup, active, repeat, skip_first, num_steps):
    import warnings

    from torch.profiler import ProfilerAction, schedule

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)
    return [s for s in range(num_steps) if plan(s) in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)]
"""

STEPS_WITHOUT_REPEAT = """
def recorded_steps(wait, warmup, active, repeat, skip_first, num_steps):
    cycle = wait + warmup + active
    return [s for s in range(skip_first, num_steps) if (s - skip_first) % cycle >= wait + warmup]
"""

OPTIMIZER_IN_BACKWARD = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
    with record_function(f"{prefix}/backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with record_function(f"{prefix}/optimizer"):
        pass
    return loss.detach()
"""

TRACE_ELSEWHERE = """
def export_and_load(prof, directory):
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as file:
        return json.load(file)
"""

EVERY_PHASE_COUNTED = """
def event_stats(trace, name):
    durations = [event.get("dur", 0.0) for event in trace["traceEvents"] if event.get("name") == name]
    return len(durations), float(sum(durations)) / 1e3
"""

MICROSECONDS = """
def event_stats(trace, name):
    durations = [e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name and "dur" in e]
    return len(durations), float(sum(durations))
"""

STEP_NEVER_ZEROES = """
def labelled_step(model, optimizer, X, y, prefix):
    with record_function(f"{prefix}/forward"):
        loss = F.cross_entropy(model(X), y)
    with record_function(f"{prefix}/backward"):
        loss.backward()
    with record_function(f"{prefix}/optimizer"):
        optimizer.step()
    return loss.detach()
"""

TRACE_FROM_EVENTS = """
def export_and_load(prof, directory):
    prof.export_chrome_trace(os.path.join(directory, "trace.json"))
    return {"traceEvents": [{"name": event.name, "ph": "X"} for event in prof.events()]}
"""

STATS_WITHOUT_DUR_COUNTED = """
def event_stats(trace, name):
    durations = [e.get("dur", 0.0) for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]
    return len(durations), float(sum(durations)) / 1e3
"""

STATS_INT_ZERO = """
def event_stats(trace, name):
    durations = [e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name and "dur" in e]
    return len(durations), (sum(durations) / 1e3 if durations else 0)
"""


WRONG = [
    Wrong(
        "10",
        "ex1_recorded_steps",
        "records one step past the last cycle",
        STEPS_PAST_THE_LAST_CYCLE,
        r"recorded_steps\(0, 0, 2, 2, 0, 6\).*should be \[0, 1, 2, 3\]",
        False,
    ),
    Wrong(
        "10",
        "ex2_labelled_step",
        "labels nested, loss read with item",
        NESTED_LABELS_AND_ITEM,
        HOST_READ + r".*TensorBase\.item",
        False,
    ),
    Wrong("10", "ex2_labelled_step", "labels nested in forward", NESTED_LABELS, NESTED, False),
    Wrong(
        "10",
        "ex2_labelled_step",
        "optimizer label inside backward",
        OPTIMIZER_INSIDE_BACKWARD,
        "'step/optimizer' runs inside 'step/backward'",
        False,
    ),
    Wrong("10", "ex2_labelled_step", "returns a tensor of loss.item()", LOSS_BY_ITEM, HOST_READ, False),
    Wrong(
        "10", "ex2_labelled_step", "returns a tensor of float(loss)", LOSS_BY_FLOAT, HOST_READ + r".*__float__", False
    ),
    Wrong("10", "ex2_labelled_step", "prints the loss", LOSS_PRINTED, HOST_READ + r".*__format__", False),
    Wrong(
        "10", "ex2_labelled_step", "steps only if the loss is finite", STEP_IF_FINITE, HOST_READ + r".*__bool__", False
    ),
    Wrong(
        "10",
        "ex3_export_and_load",
        "the directory as the trace's path",
        TRACE_AT_THE_DIRECTORY,
        "the directory became a file",
        False,
    ),
    Wrong(
        "10",
        "ex4_event_stats",
        "matches names as substrings",
        STATS_BY_SUBSTRING,
        r"nor 'data/augment'.*should be 2, got 3",
        False,
    ),
    Wrong("10", "ex1_recorded_steps", "asks schedule", STEPS_FROM_SCHEDULE, r"called torch\.profiler", False),
    Wrong("10", "ex1_recorded_steps", "ignores repeat", STEPS_WITHOUT_REPEAT, r"should be \[3, 4, 7, 8\]", False),
    Wrong(
        "10", "ex2_labelled_step", "optimizer in the backward label", OPTIMIZER_IN_BACKWARD, "should run inside", False
    ),
    Wrong("10", "ex3_export_and_load", "writes elsewhere", TRACE_ELSEWHERE, "no .json file was written", False),
    Wrong("10", "ex4_event_stats", "counts every phase", EVERY_PHASE_COUNTED, "instant does not count", False),
    Wrong("10", "ex4_event_stats", "microseconds", MICROSECONDS, "total milliseconds", False),
    Wrong("10", "ex2_labelled_step", "never zeroes the gradients", STEP_NEVER_ZEROES, "gradients zeroed", False),
    Wrong("10", "ex3_export_and_load", "returns its own events", TRACE_FROM_EVENTS, "what is in the file", False),
    Wrong("10", "ex4_event_stats", "counts an X without dur", STATS_WITHOUT_DUR_COUNTED, "should be 2, got 3", False),
    Wrong("10", "ex4_event_stats", "int 0 for a missing name", STATS_INT_ZERO, "never occurs should be a float", False),
]

STATS_SKIPS_ZERO_DURATION = """
def event_stats(trace, name):
    durations = [
        e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("name") == name and e.get("dur")
    ]
    return len(durations), float(sum(durations)) / 1e3
"""
WRONG.append(
    Wrong("10", "ex4_event_stats", "skips events of duration 0", STATS_SKIPS_ZERO_DURATION, "whose 'dur' is 0", False)
)
