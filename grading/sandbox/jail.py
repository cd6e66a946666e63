"""The wrapper that every grading kernel starts through: limits, hiding, a separate user.

Run as a script (``python .../jail.py CONFIG_JSON -- KERNEL_ARGV...``), never imported by
path through the package, so that it starts in milliseconds without importing torch. It
only uses the standard library. ``sandbox.jail_argv`` puts it behind ``unshare`` when the
machine allows, so it runs as root of fresh network, mount and PID namespaces; it then:

1. makes the interpreter reachable for the grading user (see ``_expose``), makes the
   Python environment and the course's packages read-only (``_read_only``: at the
   ``userns`` level the kernel runs as you, and could otherwise plant a ``.pth`` file that
   every later Python process of yours would run), hides the course directories
   (gradebook, ``source/``, submissions) under empty read-only tmpfs mounts, gives
   ``/var/tmp``, ``/dev/shm`` and ``/run/lock`` small private tmpfs, ``/dev/pts`` a private
   instance (a pseudo-terminal a kernel opens is no channel to another job's) and
   ``/dev/mqueue`` its own IPC namespace's queues, caps that namespace's System V IPC
   (``_ipc_limits``: its objects vanish with the namespace, and meanwhile their memory is
   bounded), and brings up the loopback interface of its own network namespace (nothing else);
2. hands the kernel's connection file (if any) and working directory to the grading user;
3. sets resource limits (address space, processes, file size, CPU time, no core dumps),
   and with ``realtime`` set (timed rounds on a CPU the measurement holds) the round-robin
   real-time policy, which every thread and child inherits;
4. drops to the grading user (when root), forbids gaining privileges (``no_new_privs``),
   asks to be killed with its parent, and installs a seccomp filter (``_seccomp``) that
   refuses the kernel keyring's calls (``add_key``, ``request_key``, ``keyctl``): keys are
   kept per user id, not per namespace, so a key would outlive the kernel and reach the next
   job run as the same grading user (Docker's default profile refuses them for the same
   reason). With ``cpu`` set (timed rounds of a measured test), it first pins the process
   to that CPU, and the filter refuses ``sched_setaffinity`` too, so neither it nor any
   thread or process it starts can use another core;
5. execs the command with a clean environment.

Any step that the machine does not allow is skipped only if the config says so; otherwise
the jail exits with status 97 and a message on stderr, so a missing protection is never
silent.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import signal
import struct
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_BIND = 4096
_MS_REMOUNT = 32
_MS_REC = 16384
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(libc: ctypes.CDLL, target: str, options: str, readonly: bool = False) -> None:
    flags = _MS_NOSUID | _MS_NODEV | (_MS_RDONLY if readonly else 0)
    if libc.mount(b"tmpfs", target.encode(), b"tmpfs", flags, options.encode()) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount tmpfs on {target}: {os.strerror(errno)}")


def _expose(libc: ctypes.CDLL, paths: list[str]) -> None:
    """Make ``paths`` reachable for the grading user without opening their parents.

    A directory on the way that others may not traverse (``/root`` holding a pyenv
    Python, say) is covered with an empty tmpfs in this mount namespace, and only the
    entries on the way are bound back in: the interpreter becomes reachable and the rest
    of that directory stays out of sight.
    """
    needed: dict[str, set[str]] = {}
    for path in paths:
        parts = os.path.realpath(path).split(os.sep)
        for depth in range(1, len(parts) - 1):
            ancestor = os.sep.join(parts[: depth + 1]) or os.sep
            if not os.stat(ancestor).st_mode & 0o001:
                needed.setdefault(ancestor, set()).add(parts[depth + 1])
    for ancestor in sorted(needed, key=len):
        fds = {name: os.open(os.path.join(ancestor, name), os.O_PATH) for name in needed[ancestor]}
        _mount_tmpfs(libc, ancestor, "size=4k,mode=0755")
        for name, fd in fds.items():
            target = os.path.join(ancestor, name)
            os.mkdir(target)
            if libc.mount(f"/proc/self/fd/{fd}".encode(), target.encode(), None, _MS_BIND | _MS_REC, None) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"bind {target}: {os.strerror(errno)}")
            os.close(fd)


def _read_only(libc: ctypes.CDLL, paths: list[str]) -> None:
    """Bind each of ``paths`` onto itself and remount the binding read-only (this mount namespace only).

    The flags a user namespace may not drop (``nosuid``, ``nodev``, ``noexec``, ...) are
    kept, as the kernel requires of a remount there.
    """
    keep = {1: 1, 2: 2, 4: 4, 8: 8, 1024: 1024, 2048: 2048, 4096: 1 << 21}  # ST_* -> MS_*
    for path in sorted({os.path.realpath(p) for p in paths}, key=len):
        if not os.path.isdir(path):
            continue
        if libc.mount(path.encode(), path.encode(), None, _MS_BIND | _MS_REC, None) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"bind {path}: {os.strerror(errno)}")
        present = os.statvfs(path).f_flag
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | sum(ms for st, ms in keep.items() if present & st)
        if libc.mount(None, path.encode(), None, flags, None) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"make {path} read-only: {os.strerror(errno)}")


# seccomp: the audit architecture and the numbers of the calls refused, per machine
_SECCOMP_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_KEYRING_CALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}  # add_key, request_key, keyctl
_SCHED_SETAFFINITY = {"x86_64": 203, "aarch64": 122}


def _seccomp(libc: ctypes.CDLL, refused: list[int]) -> None:
    """Make the system calls numbered ``refused`` fail with EPERM, here and in every thread and child, for good.

    A seccomp filter is inherited by every thread and process and cannot be removed; it
    needs ``no_new_privs`` (set before) when the process is not privileged. Calls through
    another ABI (32-bit compat, x32) would bypass the numbers: they kill the process.
    """
    arch = _SECCOMP_ARCH[platform.machine()]
    ld_w_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, eperm, kill = 0x7FFF0000, 0x00050000 | 1, 0x80000000
    program = [
        (ld_w_abs, 0, 0, 4),  # A = seccomp_data.arch
        (jeq, 1, 0, arch),
        (ret, 0, 0, kill),  # another ABI (32-bit compat): not allowed here
        (ld_w_abs, 0, 0, 0),  # A = seccomp_data.nr
    ]
    checks = [0x40000000, *refused]  # x32 ABI numbers first (A >= 0x40000000), then each refused call
    for index, number in enumerate(checks):
        to_eperm = len(checks) - index  # past the remaining checks and the "allow"
        program.append((jge if index == 0 else jeq, to_eperm, 0, number))
    program += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    filters = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(filters)
    fprog = struct.pack("HxxxxxxP" if struct.calcsize("P") == 8 else "HxxP", len(program), ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    address = ctypes.c_void_p(ctypes.addressof(fprog_buffer))  # a pointer, not a C int
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, address, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"seccomp filter: {os.strerror(errno)}")


def _ipc_limits(limits: dict[str, int]) -> None:
    """Set this IPC namespace's System V limits (``/proc/sys/kernel/NAME``; the namespace is new, so ours only)."""
    for name, value in limits.items():
        with open(f"/proc/sys/kernel/{name}", "w", encoding="ascii") as sysctl:
            sysctl.write(str(value))


def _private_devices(libc: ctypes.CDLL) -> None:
    """A devpts instance of its own on /dev/pts, and this IPC namespace's message queues on /dev/mqueue."""
    noexec = 8
    mounts = [
        (b"devpts", "/dev/pts", _MS_NOSUID | noexec, b"newinstance,ptmxmode=0666,mode=0620"),
        (b"mqueue", "/dev/mqueue", _MS_NOSUID | _MS_NODEV | noexec, None),
    ]
    for kind, target, flags, options in mounts:
        if os.path.isdir(target) and libc.mount(kind, target.encode(), kind, flags, options) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"mount {kind.decode()} on {target}: {os.strerror(errno)}")


def _loopback_up() -> None:
    """Bring up ``lo`` in the fresh network namespace (it starts down): local servers such as
    torch.distributed's rendezvous work, and still nothing outside the namespace is reachable."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def _fail(message: str) -> None:
    sys.stderr.write(f"course jail: {message}\n")
    sys.stderr.flush()
    os._exit(97)


def main(argv: list[str]) -> None:
    config = json.loads(argv[0])
    kernel = argv[argv.index("--") + 1 :]
    libc = _libc()

    if config["mounts"]:
        try:
            if config["uid"] is not None:
                _expose(libc, config["expose"])
            _read_only(libc, config["expose"])
            for path in config["hide"]:
                if os.path.isdir(path):
                    _mount_tmpfs(libc, path, "size=4k,mode=0755", readonly=True)
            for path in ("/var/tmp", "/dev/shm", "/run/lock"):
                if os.path.isdir(path):
                    _mount_tmpfs(libc, path, "size=16m,mode=1777")
            _private_devices(libc)
            _ipc_limits(config.get("ipc") or {})
            _loopback_up()
        except OSError as error:
            _fail(str(error))

    uid, gid = config["uid"], config["gid"]
    if uid is not None:
        for path in (config["workdir"], config.get("connection_file")):
            if path:
                os.chown(path, uid, gid)

    limits = {
        resource.RLIMIT_AS: config["memory_bytes"],
        resource.RLIMIT_FSIZE: config["file_bytes"],
        resource.RLIMIT_CPU: config["cpu_seconds"],
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_NOFILE: 1024,
    }
    if config["processes"]:
        limits[resource.RLIMIT_NPROC] = config["processes"]
    for kind, value in limits.items():
        hard = value if kind != resource.RLIMIT_CPU else value + 5
        try:
            resource.setrlimit(kind, (value, hard))
        except (ValueError, OSError) as error:
            _fail(f"cannot set limit {kind}: {error}")
    if config.get("realtime"):
        try:
            os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(config["realtime"]))
        except OSError as error:
            _fail(f"cannot run at real-time priority {config['realtime']}: {error}")

    if uid is not None:
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        except OSError as error:
            _fail(f"cannot switch to the grading user {uid}: {error}")
    # Setting credentials clears the parent-death signal: ask for it afterwards.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("cannot set no_new_privs")
    machine = platform.machine()
    refused = list(_KEYRING_CALLS.get(machine, ()))
    if config.get("cpu") is not None:
        try:
            os.sched_setaffinity(0, {config["cpu"]})
        except OSError as error:
            _fail(f"cannot pin the process to CPU {config['cpu']}: {error}")
        refused.append(_SCHED_SETAFFINITY.get(machine, -1))
    if machine in _SECCOMP_ARCH:
        try:
            _seccomp(libc, refused)
        except OSError as error:
            _fail(str(error))
    elif config.get("cpu") is not None:
        _fail(f"cannot keep the process on CPU {config['cpu']}: no seccomp filter for {machine}")

    os.chdir(config["workdir"])
    os.execve(kernel[0], kernel, config["env"])


if __name__ == "__main__":
    main(sys.argv[1:])
