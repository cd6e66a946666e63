"""Where learner code runs: isolation, limits, worker processes, one notebook in a jailed kernel.

* ``protections``  what isolation this machine offers (``detect``), the limits, the jail command;
* ``jail``         the standard-library-only wrapper every kernel starts through (run as a script);
* ``worker``       grading worker processes (``WorkerPool``), each running one notebook at a time;
* ``execute``      one prepared notebook in a jailed kernel: timeouts, output caps, restarts;
* ``rounds``       fresh jailed processes for the timed rounds of a measured test, timed from outside;
* ``cpus``         a measured test's CPU: held against every other job, and accounted (cgroups, PSI).

Importing this package has no side effects.
"""

__all__: list[str] = []
