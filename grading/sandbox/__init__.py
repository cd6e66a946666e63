"""Where learner code runs: isolation, limits, worker processes, one notebook in a jailed kernel.

* ``protections``  what isolation this machine offers (``detect``), the limits, the jail command;
* ``jail``         the standard-library-only wrapper every kernel starts through (run as a script);
* ``workers``      the pool of grading worker processes on this machine (``WorkerPool``);
* ``worker``       one grading worker process, running one notebook at a time;
* ``execute``      one prepared notebook in a jailed kernel: restarts, grader checks, what is left of a cell;
* ``kernel``       the jailed kernel, and the client that runs one cell under its CPU and wall-clock limits;
* ``cputime``      the CPU time a kernel and everything it starts used (a cell's time limit);
* ``leaks``        no hidden test's text in any output;
* ``rounds``       fresh jailed processes for the timed rounds of a measured test, timed from outside;
* ``round_child``  the round process's own side: its end of the pipe to the grader, and its ``main``;
* ``cpus``         a measured test's CPU held against every other job, and each job's CPUs and share;
* ``ledger``       how long other work still took a measured test's CPU (PSI, cpuacct, /proc);
* ``cgroups``      the cgroup file operations behind ``cpus``, one backend per layout (``detect_layout``);
* ``cgroup2``      the grader's own subtree on a host that mounts only cgroup v2 (jobs, measurements, kernels);
* ``memory``       a job's memory budget: a kernel (or a round process) and every process it starts.

Importing this package has no side effects.
"""

__all__: list[str] = []
