"""The capstone of notebook 12 ("Make this training loop fast"): a slow but correct training loop, and its grader.

Contract: nothing happens at import. ``slow_train(task, device)`` trains a small MLP on the
digits with every mistake the course taught you to avoid, and returns ``(model, losses)``;
a learner's ``fast_train(task, device)`` must return the same kind of pair. One module per
role:

================  ==========================================================================
``task``          what to train: ``CapstoneTask``, ``GRADED_TASK``, ``OTHER_TASK``, the stored
                  images and their per-image transform (``standardize_image``, ``DigitsPixels``)
``model``         ``CapstoneNet`` and ``make_model(task)``
``baseline``      ``slow_train``, the loop to beat
``correctness``   ``check_same_training``: the same training within stated tolerances
``reference``     ``reference_train``, the course's solution of exercise 3: the yardstick
                  the speed points are scaled by, timed beside every answer
``scoring``       ``Speedup``, the share of the reference's gain, its tiers and the points
                  (plain Python)
``transfer``      a result as plain float32 arrays, from a timed-round process to the grader
``round_process`` ``timed_rounds``, what runs in the grader's timed-round processes
``referee``       ``referee``: the measured test as the grader decides it, outside the kernel
``diagnosis``     ``diagnose``: counters of what a run does, and the mistakes they show
``in_kernel``     ``measure_speedup`` and ``grade_fast_train``, the test as it runs in the
                  learner's kernel
``autocast_watch`` what exercise 2's test watches (``watch_autocast``, ``as_if_on_cuda``)
================  ==========================================================================

The course's referee plugin (``grading/course/capstone_referee.py``) calls ``referee`` in
the grading worker, which uses ``task``, ``transfer``, ``correctness`` and ``scoring`` there,
and ``round_process`` in the processes it times; it never imports the grader (the plugin
hands in the grader's exception types). This package itself re-exports the names notebook 12 imports from
``course_utils.capstone`` (its setup cell, its exercises' tests, and what its text tells a
learner to import), so that a released notebook keeps working; everything else is imported
from its module.
"""

from __future__ import annotations

from course_utils.capstone.autocast_watch import as_if_on_cuda, watch_autocast
from course_utils.capstone.baseline import slow_train
from course_utils.capstone.correctness import check_same_training, evaluate
from course_utils.capstone.diagnosis import TorchCallCounter, diagnose
from course_utils.capstone.in_kernel import grade_fast_train, measure_speedup
from course_utils.capstone.model import CapstoneNet, make_model
from course_utils.capstone.scoring import CORRECTNESS_POINTS
from course_utils.capstone.task import GRADED_TASK, STD_EPS, CapstoneTask, DigitsPixels, standardize_image

__all__ = [
    "CORRECTNESS_POINTS",
    "GRADED_TASK",
    "STD_EPS",
    "CapstoneNet",
    "CapstoneTask",
    "DigitsPixels",
    "TorchCallCounter",
    "as_if_on_cuda",
    "check_same_training",
    "diagnose",
    "evaluate",
    "grade_fast_train",
    "make_model",
    "measure_speedup",
    "slow_train",
    "standardize_image",
    "watch_autocast",
]
