"""What crosses a process or machine boundary (``grading.jobs``) survives the trip, and both pools are a ``Pool``."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from grading.cluster import ClusterPool
from grading.cluster.tasks import TaskSettings
from grading.jobs import Job, NotebookJob, Outcome, Result, Task
from grading.pool import Pool, threads_per_kernel
from grading.sandbox.protections import Limits, Protections
from grading.sandbox.workers import WorkerPool

MEASURED = {"grade_id": "t", "referee": "ref", "source": "def referee(rounds): ...", "answers": ["a"]}


def _task() -> Task:
    nb = new_notebook(cells=[new_code_cell("print(1)")])
    return Task(nb, files="/course/autograded/alice/ps1", measured=(MEASURED,), skipped=("big.bin (too big)",))


def test_a_job_crosses_the_pipe_as_one_json_line_and_comes_back_equal():
    limits = Limits(cell_timeout=7.5, threads=2)
    job = Job(_task(), slot=3, limits=limits, level="userns", hide=("/x",), private_tmp=True)
    line = job.to_json()
    assert "\n" not in line
    assert Job.from_json(line) == Job.from_json(json.dumps(json.loads(line)))
    again = Job.from_json(line)
    assert (again.slot, again.level, again.hide, again.private_tmp) == (3, "userns", ("/x",), True)
    assert again.limits == job.limits and again.task.measured == (MEASURED,)
    assert again.task.skipped == job.task.skipped and again.task.files == job.task.files
    assert again.task.nb == json.loads(json.dumps(job.task.nb))
    # the worker reads one flat dict: the task's keys and the slot's
    assert set(json.loads(line)) == {"nb", "files", "measured", "skipped", "slot", "limits", "level", "hide",
                                     "private_tmp"}  # fmt: skip


def test_a_task_is_made_from_its_dict_form_with_only_the_notebook_required():
    nb = new_notebook()
    assert Task.of({"nb": nb}) == Task(nb)
    task = _task()
    assert Task.of(task) is task
    assert Task.from_dict(task.to_dict()) == task


@pytest.mark.parametrize(
    "result",
    [
        Result(nb={"cells": [], "nbformat": 4}, notes=("a",), seconds=1.5, private_tmp=True),
        Result.failure("the grading worker died"),
    ],
)
def test_a_result_crosses_the_pipe_and_dask_unchanged(result):
    assert Result.from_json(result.to_json()) == result
    assert pickle.loads(pickle.dumps(result)) == result
    assert Result.of(result.to_dict()) == result
    assert (result.nb is None) != (result.error is None)


def test_a_result_without_a_notebook_is_a_failure():
    assert Result.from_dict({"notes": ["n"], "seconds": 1}).error == "the grading worker returned no notebook"


def test_what_a_cluster_task_carries_pickles_and_round_trips():
    settings = TaskSettings(("x (a symbolic link)",), Limits(), "auto", ("/hide",), {"torch": "2"}, {"h": 2}, True)
    assert TaskSettings.from_json(settings.to_json()) == settings
    job = NotebookJob("alice", "ps1", "p1", b"{}", notes=("n",), autograded="/a")
    outcome = Outcome("text", ["note"], 1.0, scores={"t": 1.0}, comments={"a": None}, recorded=True, manual=["t"])
    assert pickle.loads(pickle.dumps(job)) == job
    assert pickle.loads(pickle.dumps(outcome)) == outcome


def test_both_pools_are_a_pool_and_only_the_cluster_grades_whole_notebooks() -> None:
    cluster: Pool = ClusterPool("tcp://127.0.0.1:1")  # mypy checks these assignments against the protocol
    assert isinstance(cluster, Pool) and cluster.remote
    with WorkerPool(1, Protections("none"), Limits(), [Path("/hidden")]) as started:
        local: Pool = started
        assert isinstance(local, Pool) and not local.remote
        assert local.describe() == Protections("none").describe()
        with pytest.raises(NotImplementedError):
            local.submit_notebook("k", NotebookJob("alice", "ps1", "p1", b""), None, "/f")  # type: ignore[arg-type]  # refused before the recipe is read


def test_a_kernel_gets_at_least_one_thread():
    assert threads_per_kernel(10_000) == 1
    assert threads_per_kernel(0) >= 1
