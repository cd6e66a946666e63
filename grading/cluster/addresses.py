"""The address policy of a cluster: TLS, or plain TCP only where nothing beyond this machine can reach it.

Contract: ``scheduler_address(target)`` is the scheduler's address, given or read from the
file ``dask scheduler --scheduler-file`` writes (``CourseError`` when unreadable).
``check_address(address, allow_plain)`` returns its protocol and refuses (``CourseError``,
``plain_refusal``'s words) a plain one (``PLAIN``: no authentication, no encryption) whose
host is not a loopback address unless ``allow_plain``. ``beyond_loopback(addresses)`` names
the addresses, advertised (``tcp://host:port``) or bound (``host:port``), that another
machine could reach; ``listening(pid)`` reads where a process listens from the operating
system (psutil), and ``dask_listening`` where a Dask scheduler or worker, and a worker's
nanny, listen: what a plain-TCP cluster's check compares, since Dask listens beyond its
address unless told otherwise. Importing this module does not import Dask.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from grading.errors import CourseError

__all__ = ["PLAIN", "beyond_loopback", "check_address", "dask_listening", "listening", "plain_refusal",
           "scheduler_address"]  # fmt: skip

PLAIN = frozenset({"tcp", "ws", "inproc", "ucx"})  # Dask protocols without encryption or authentication


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a host name: it may be anything
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return bool((mapped or address).is_loopback)


def check_address(address: str, allow_plain: bool = False) -> str:
    """The protocol of ``address`` (``tls``, ``tcp``, ...); plain TCP beyond this machine only with ``allow_plain``.

    A ``tcp://`` scheduler has no authentication: whoever reaches its port runs any code
    on every worker. So it is refused unless its host is a loopback address (the cluster
    is this machine's) or the instructor says the network is private (``--allow-plain-tcp``).
    """
    from distributed.comm import parse_address

    protocol, location = parse_address(address)
    if protocol not in PLAIN or allow_plain or protocol == "inproc":  # inproc: this very process
        return str(protocol)
    if _is_loopback(_host(location)):
        return str(protocol)
    raise plain_refusal(protocol, location)


def _host(location: str) -> str:
    from distributed.comm import parse_address, parse_host_port

    if "://" in location:
        location = parse_address(location)[1]
    try:
        return str(parse_host_port(location)[0])
    except ValueError:
        return location


def plain_refusal(protocol: str, location: str, why: str = "") -> CourseError:
    """The refusal of a plain-TCP cluster at ``location``, ``why`` added after the address."""
    return CourseError(
        f"refusing {protocol}://{location}{why}: Dask's {protocol}:// connections are neither authenticated nor "
        "encrypted, so anyone who can reach the scheduler's port can run any code on every grading machine "
        "(as the user the workers run as, root for the root sandbox) and read the submissions in flight. "
        "Use mutual TLS: `course cluster-certs` makes the course's certificates and prints the `dask "
        f"scheduler` and `dask worker` flags, then run `course autograde --scheduler tls://{location}`. "
        "Only on a private network that nothing but the grading machines and yours can reach, "
        "--allow-plain-tcp grades over plain TCP anyway"
    )


def beyond_loopback(addresses: list[str]) -> list[str]:
    """Which of a cluster's addresses another machine could reach.

    Advertised addresses (``tcp://host:port``) or bound ones (``host:port``, ``listening``);
    a socket bound to every interface (``0.0.0.0``, ``[::]``) is reachable from other machines.
    """
    return sorted({a for a in addresses if not _is_loopback(_host(a))})


def scheduler_address(target: str) -> str:
    """The scheduler's address: ``target`` itself, or the ``address`` in a scheduler file."""
    if "://" in target or not (target.endswith(".json") or os.sep in target or Path(target).is_file()):
        return target
    path = Path(target)
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["address"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CourseError(
            f"cannot read the scheduler's address from {path} ({type(error).__name__}: {error}); "
            "give the file `dask scheduler --scheduler-file` wrote, or the address, e.g. tcp://host:8786"
        ) from error


def listening(pid: int | None = None) -> list[str]:
    """Where process ``pid`` (this one by default) listens: ``host:port`` of each listening TCP socket, as the OS says.

    Read with psutil (``Process.net_connections``, status ``LISTEN``), so it covers every
    listener of the process, whatever opened it: Dask's comm listeners, its HTTP server
    (started with ``--no-dashboard`` too), a preload's. An IPv6 host is written in brackets.
    """
    import psutil

    found = set()
    for connection in psutil.Process(pid).net_connections(kind="inet"):
        if connection.status == psutil.CONN_LISTEN:
            host, port = connection.laddr[:2]
            found.add(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return sorted(found)


def dask_listening(dask_worker: Any = None) -> list[str]:
    """Where this Dask process listens, and, on a worker started by a nanny, where the nanny (its parent) listens.

    Run on the scheduler (``Client.run_on_scheduler``: no argument) and on each worker
    (``Client.run``, which passes ``dask_worker``). A nanny starts its worker as a child
    process (multiprocessing), so the parent is the nanny exactly when the worker has one.
    """
    found = listening()
    if dask_worker is not None and getattr(dask_worker, "nanny", None):
        found += listening(os.getppid())
    return sorted(set(found))
