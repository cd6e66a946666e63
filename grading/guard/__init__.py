"""The grader's own code inside the grading kernel: what the tests rely on is checked before,
during and after every test cell, the test runs in a scope the code under test cannot reach,
and objects that lie earn no points.

Contract, grader side (``grading.guard.protocol``): ``preamble(sources)`` is the source of the
first cell the grader runs, before any learner code; ``guard(index, hidden)`` the source of the
cell it runs right before each test cell (``hidden``: the test cell's hidden-test line numbers)
and ``closing(index)`` the source of the cell it runs right after. Each of these two answers
with ``digest(token, index, phase)``, an HMAC of a secret the worker hands the kernel in
``TOKEN_FILE``; the executor fails the test, and every later one, when the answer is missing
or wrong. Test cells themselves are sent with ``store_history=False``.

Kernel side (the package imports only the standard library until ``install`` is told which
modules the notebook uses; importing it loads every module of ``MODULES``, so that the
preamble has them all before any learner code runs), by role:

* ``protocol``: the grader's cells, the digest, the helpers' positions, ``MODULES``, the error;
* ``kernel``: ``install``, ``check``, ``close``, the entry points the grader's cells call;
* ``watchlist``: what the tests rely on, as tables (comparison functions of torch, numpy and
  math, ``course_utils.checks``, builtins, IPython's execution, display and error machinery),
  and the types that count as plain values;
* ``trust``: which code counts as installed (the interpreter's, the environment's, the course's),
  and what code existed before the notebook's first cell;
* ``records`` and ``recheck``: what the watched objects are made of (code, defaults, closures,
  globals, builtins, module and class attributes, ``__wrapped__``, virtual subclasses), recorded
  once, and compared again by identity;
* ``state``: the state ``install`` builds and the helpers a rewritten test cell calls (what may
  run code the guard does not trust, and everything compared again when it may have run);
* ``lying``: the checks on objects that lie;
* ``cell`` and ``rewrite``: the test cell scrubbed of its hidden lines wherever the kernel keeps
  its source, and rewritten into a function of its own with module semantics (README, "What a
  test cell means"), its values, calls, items and comparisons routed through the helpers;
* ``vault``: the audit hook, which alone holds the secret, decides every verdict, refuses code
  and frame tampering, and compares the guard's own modules before it trusts any of them.

The names inside the modules keep their leading underscore: they are the guard's internals, and
a verdict names what changed by them (``the grader's _State``, ``the grader's check``).

All of this runs in the learner's interpreter: it is a tripwire and a filter, not a proof.
The README's threat model says what it stops, what only the grader outside the kernel
guarantees, and what escapes.
"""

from __future__ import annotations

from grading.guard import cell, kernel, lying, protocol, recheck, records, rewrite, state, trust, vault, watchlist
from grading.guard.kernel import check, close, install
from grading.guard.protocol import (
    HELPERS,
    MODULES,
    ROLE_KEY,
    TOKEN_FILE,
    GradingIntegrityError,
    closing,
    digest,
    guard,
    preamble,
    watched_modules,
)

__all__ = [
    "HELPERS",
    "MODULES",
    "ROLE_KEY",
    "TOKEN_FILE",
    "GradingIntegrityError",
    "cell",
    "check",
    "close",
    "closing",
    "digest",
    "guard",
    "install",
    "kernel",
    "lying",
    "preamble",
    "protocol",
    "recheck",
    "records",
    "rewrite",
    "state",
    "trust",
    "vault",
    "watched_modules",
    "watchlist",
]
