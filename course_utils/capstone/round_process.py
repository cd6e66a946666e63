"""What runs inside the grader's timed-round processes: ``timed_rounds``, the entry the referee names.

Each process (``grading.sandbox.rounds``) is the course's or the answer's. The course's
runs only the course's code, ``slow_train`` (the baseline) and ``reference_train`` (the
reference solution), whichever each task names; the answer's loads the learner's
``fast_train`` from ``ANSWER_IMPORTS`` and their answer cells. Each warms up once (every
function it runs), then trains each task the grader sends and sends the result back
(``course_utils.capstone.transfer``), or its ``diagnose`` counters.
"""

from __future__ import annotations

import torch

from course_utils.capstone.baseline import slow_train
from course_utils.capstone.diagnosis import diagnose
from course_utils.capstone.reference import own_work, reference_train
from course_utils.capstone.task import CapstoneTask, TrainFn
from course_utils.capstone.transfer import result_arrays

__all__ = ["ANSWER_IMPORTS", "timed_rounds"]

ANSWER_IMPORTS = """\
import inspect
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import profile

from course_utils import compare, format_environment, load_digits_split, pick_device, scaled, seed_everything
from course_utils.capstone import (
    CORRECTNESS_POINTS,
    GRADED_TASK,
    CapstoneNet,
    CapstoneTask,
    TorchCallCounter,
    check_same_training,
    diagnose,
    evaluate,
    grade_fast_train,
    make_model,
    measure_speedup,
    slow_train,
    standardize_image,
)
from course_utils.profiling import label_times, plot_label_times, profiler_activities
"""
"""What a timed-round process runs before the learner's answer cells: notebook 12's setup-cell imports."""


def _load_answer(answers: list[list[str]]) -> TrainFn:
    """The learner's ``fast_train``: ``ANSWER_IMPORTS``, then their answer cells, in a fresh namespace."""
    namespace: dict = {"__name__": "__main__"}
    exec(compile(ANSWER_IMPORTS, "<notebook 12's imports>", "exec"), namespace)
    for grade_id, source in answers:
        try:
            code = compile(source, f"<your cell {grade_id}>", "exec")
        except SyntaxError as error:
            raise AssertionError(
                f"your cell {grade_id} is not plain Python ({error.msg}, line {error.lineno}): the grader runs it "
                "in a plain Python process, where IPython's % and ! lines do not work"
            ) from None
        exec(code, namespace)
    train = namespace.get("fast_train")
    if not callable(train):
        raise AssertionError("no fast_train function after running your answer cells")
    return own_work(train)


def timed_rounds(channel, setup: dict) -> None:
    """Inside a fresh timed-round process (``grading.sandbox.rounds``): warm up, then train what the grader sends.

    ``setup["role"]`` is ``"course"`` (``slow_train`` and ``reference_train``, the course's
    code: no learner code ever runs in this process) or ``"answer"`` (the learner's
    ``fast_train``, loaded by ``_load_answer``, refused if it runs ``reference_train``).
    One warm-up run of each function on ``setup["warmup"]``, untimed; then, for each
    round the grader sends, the task it names (drawn when the round starts), trained by
    the function its ``"train"`` names in the course's process (``"baseline"`` or
    ``"reference"``): the result goes back through ``result_arrays``, or with
    ``"diagnose"`` the counters of ``diagnose``.
    """
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    if setup["role"] == "course":
        trains: dict[str, TrainFn] = {"baseline": slow_train, "reference": reference_train}
    else:
        trains = {"answer": _load_answer(setup["answers"])}
    warmup = CapstoneTask(**setup["warmup"])
    for train in trains.values():
        result_arrays(train(warmup, cpu), warmup)
    channel.ready()
    default = next(iter(trains))
    while (spec := channel.receive()) is not None:
        task = CapstoneTask(**spec["task"])
        train = trains.get(spec.get("train", default), trains[default])
        if spec.get("diagnose"):
            found = diagnose(train, task, cpu)
            channel.send({}, summary=found.summary(), mistakes=found.mistakes())
        else:
            channel.send(result_arrays(train(task, cpu), task))
