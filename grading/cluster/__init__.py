"""Grade on a Dask cluster: ``course autograde --scheduler ADDRESS``.

Contract: ``ClusterPool`` (``pool``) is a ``grading.pool.Pool`` whose slots are the worker
threads of an existing ``dask.distributed`` cluster, so ``autograde`` grades a class there
through its one code path: the gradebook, the staging folders, the notes, the progress bar
and a stop midway are the same as on one machine. Importing this package does not import
Dask (the ``cluster`` extra); a missing Dask is ``DaskMissing``, a ``CourseError``. Its parts:

* ``addresses``: the address policy: TLS, or plain TCP only where nothing beyond this
  machine can reach the cluster (``check_address``, ``beyond_loopback``, ``listening``);
* ``environment``: the fingerprint every worker must share with the coordinator
  (``environment``, ``differences``);
* ``files``: the assignment's other files, zipped to travel with each task (``pack_files``,
  ``unpack_files``);
* ``tasks``: what runs on a worker: its check and the tasks that grade one notebook each
  (``grade``, ``grade_notebook``; ``WorkerRefused``);
* ``pool``: ``ClusterPool``, the coordinator's side.
"""

from __future__ import annotations

from grading.cluster.addresses import beyond_loopback, check_address, dask_listening, listening, scheduler_address
from grading.cluster.environment import PACKAGES, differences, environment
from grading.cluster.files import pack_files, unpack_files
from grading.cluster.pool import ClusterPool, DaskMissing
from grading.cluster.tasks import WorkerRefused, grade, grade_notebook

__all__ = [
    "PACKAGES",
    "ClusterPool",
    "DaskMissing",
    "WorkerRefused",
    "beyond_loopback",
    "check_address",
    "dask_listening",
    "differences",
    "environment",
    "grade",
    "grade_notebook",
    "listening",
    "pack_files",
    "scheduler_address",
    "unpack_files",
]
