"""Run one command in a virtual machine whose kernel mounts only cgroup v2 (issue 29's test bed).

Longer than 500 lines because it is one self-contained maintainer tool whose parts only make sense
together: the initramfs writer, the guest's init script, qemu's command line and the console protocol.

Usage (from anywhere; the command runs in the repository root, as the guest sees it)::

    make grading-test-cgroup2                     # the tests of tests/cgroup2 in the machine
    python tools/cgroup2_vm.py --timeout 300 --memory 2048 --cpus 2 -- sh -c 'cat /proc/self/mounts'
    python tools/cgroup2_vm.py -- .venv/bin/python -m pytest -o addopts= -p no:nbval \\
        --confcutdir=tests/cgroup2 -q tests/cgroup2

Why. The grader's protections (``grading.sandbox.cgroups``) have a cgroup v1 backend; a
machine that mounts only cgroup v2 needs its own, and this development machine mounts v1
hierarchies, so neither the kernel mechanisms nor a v2 backend can be tried here. This tool
boots the Debian kernel installed on this machine (``linux-image-amd64``) in qemu, with
cgroup v1 switched off (``cgroup_no_v1=all``), and runs the command there as root.

What the guest sees. A busybox initramfs (built here, cached in ``build/cgroup2-vm/``, and
rebuilt when the kernel, its modules, busybox or this tool's init script change) loads the
virtio, 9p and overlay modules, mounts this machine's ``/`` read-only over 9p under a tmpfs
overlay, mounts ``proc``, ``sysfs``, ``devtmpfs``, tmpfs on ``/tmp``, ``/run`` and
``/dev/shm``, and ``cgroup2`` (nothing else) at ``/sys/fs/cgroup``, and ``chroot``s into it.
So the command uses this machine's own files (the ``.venv`` included, nothing is copied), but
whatever it writes vanishes at power-off, except under ``$OUT``: a writable 9p share of a
folder here (``build/cgroup2-vm/out`` unless ``--out``; a folder under ``build/cgroup2-vm/`` is
emptied before each run, another is used as it is), mounted at the same path in the guest.
The environment is minimal (``PATH``, ``HOME``, ``LANG``, ``TERM=dumb``, ``COLUMNS``, ``OUT``,
``CGROUP2_VM=1``); stdin is ``/dev/null``.

How the result comes back. The guest's serial console is this process's pipe: the init script
prints a start marker, the command's output (streamed to stdout as it comes), then a marker
line with the command's exit status and a per-run nonce, and powers off. ``run_in_vm`` parses
the status (``VmResult``); the whole console goes to ``build/cgroup2-vm/console.log`` and the
guest's kernel log to ``$OUT/dmesg.txt``.

What it costs. No hardware virtualisation is usable here (no vmx/svm), so qemu emulates the
CPU in software (TCG, ``-cpu max``, one host thread per virtual CPU). The kernel is booted as
its uncompressed ELF image (extracted once from ``/boot/vmlinuz-*`` into the cache, about a
second; qemu starts it at its PVH entry), which spares the emulated CPU the bzImage's xz
decompression (about 10 s). The guest then runs the command 8 to 18 s after qemu starts, on
2 quiet cores, but code runs some 30 to 100 times slower than natively: ``python -c pass``
1.7 to 2.4 s, ``import pytest`` 7.5 to 14 s, ``import nbformat`` 8.9 s (104 s with jsonschema 4.25
or later, whose ``rfc3987_syntax`` builds Lark parsers: the lock keeps 4.24.1), ``import
grading.autograde`` 20 s, ``import torch`` minutes. So commands in the guest should be plain Python,
and pytest there should skip what it does not need (``make grading-test-cgroup2``'s ``-o addopts= -p
no:nbval --confcutdir=tests/cgroup2``: no notebook plugin, no root ``conftest.py``); ``make
grading-test-cgroup2-autograde`` runs ``course autograde`` there, about 15 minutes. A loaded host makes
all of it several times slower. The guest has 4 GiB of memory and 2 CPUs unless ``--memory``
and ``--cpus`` say otherwise; with 2 CPUs it keeps this machine's two cores busy. One machine
runs at a time (``build/cgroup2-vm/lock``: a second is refused).

What it needs (Debian packages, as root)::

    apt-get install qemu-system-x86 linux-image-amd64 busybox-static kmod

(``kmod`` for ``modprobe --show-depends``; qemu must be able to read the kernel image in ``/boot``,
which some systems keep readable by root only). Each missing piece is named in a ``VmError``, with
the package to install.

Exit status of ``main``: the command's, or 124 when the timeout killed the machine, or 125 when
the machine could not run the command (a missing package, a guest that stopped without a status).
Nothing runs at import time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import hashlib
import json
import lzma
import os
import re
import secrets
import selectors
import shlex
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: the guest's working directory (the same path there)."""
CACHE = ROOT / "build" / "cgroup2-vm"
"""The initramfs, its key, the per-run files and ``console.log``."""
DEFAULT_OUT = CACHE / "out"
"""The folder shared writable with the guest as ``$OUT``."""

QEMU = "qemu-system-x86_64"
BOOT = Path("/boot")
"""Where the kernel images are (``vmlinuz-<version>``)."""
MODULES_ROOT = Path("/lib/modules")
"""Where each kernel's modules are (``<version>/``)."""
MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
"""The kernel modules the initramfs loads (with their dependencies): the 9p share and the overlay."""
BUSYBOX_CANDIDATES = (Path("/bin/busybox"), Path("/usr/bin/busybox"))
"""Where busybox-static installs busybox (the first that is a static executable is used)."""
KERNEL_COMMAND_LINE = (
    "console=ttyS0",
    "panic=-1",  # a panic reboots, and -no-reboot makes qemu exit
    "quiet",
    "loglevel=4",
    "mitigations=off",  # a faster emulated kernel; nothing here is about side channels
    "cryptomgr.notests",  # the crypto self-tests take a second of emulated boot
    "systemd.unified_cgroup_hierarchy=1",
    "cgroup_no_v1=all",  # no controller can be mounted as v1
    "rdinit=/init",
)
"""The guest kernel's command line."""

DEFAULT_TIMEOUT = 900.0
DEFAULT_MEMORY_MIB = 4096
DEFAULT_CPUS = 2
TIMEOUT_STATUS = 124
HARNESS_STATUS = 125

MARKER = "CGROUP2-VM"
"""The init script's marker lines: ``CGROUP2-VM <nonce> start`` and ``CGROUP2-VM <nonce> status <n>``."""
_STATUS_LINE = re.compile(rf"^{MARKER} (?P<nonce>[0-9a-f]+) status (?P<status>\d+)\s*$")
_START_LINE = re.compile(rf"^{MARKER} (?P<nonce>[0-9a-f]+) start\s*$")
_ERROR_LINE = re.compile(rf"^{MARKER} (?P<nonce>[0-9a-f]+) init-error (?P<message>.*)$")

_INSTALL = "apt-get install qemu-system-x86 linux-image-amd64 busybox-static kmod"

# The guest's /init (busybox sh). /run.conf (the per-run archive) sets NONCE, ROOT and OUT.
INIT_SCRIPT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
. /run.conf
say() { echo "CGROUP2-VM $NONCE $*"; }
fail() { say "init-error $*"; say "status 125"; sleep 0.5; reboot -f; sleep 60; }
while read -r module options; do
    insmod "/modules/$module" $options || fail "insmod $module failed"
done < /modules.order
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /lower \
    || fail "cannot mount the host's root over 9p"
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot \
    || fail "cannot mount the overlay"
R=/newroot
mkdir -p $R/proc $R/sys $R/dev $R/tmp $R/run
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup || fail "cannot mount cgroup2"
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=755 tmpfs $R/run
if [ -n "$OUT" ]; then
    mkdir -p "$R$OUT"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out "$R$OUT" || fail "cannot mount \$OUT"
fi
mkdir -p $R/run/cgroup2-vm
cp /command.sh $R/run/cgroup2-vm/command.sh
dmesg -n 1
say start
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb \
    COLUMNS="$COLUMNS" OUT="$OUT" CGROUP2_VM=1 \
    chroot $R /bin/sh /run/cgroup2-vm/command.sh < /dev/null
status=$?
if [ -n "$OUT" ]; then dmesg > "$R$OUT/dmesg.txt"; fi
sync
say "status $status"
sleep 0.5  # the serial line drains its buffer before the reset
reboot -f
sleep 60
"""


class VmError(RuntimeError):
    """The machine could not run the command (a missing package, a guest that stopped early)."""


class VmTimeout(VmError):
    """The command did not finish within the timeout; qemu was killed."""


@dataclass(frozen=True)
class Kernel:
    """A kernel image and the version of its modules (``/lib/modules/<version>``)."""

    image: Path
    version: str
    modules: Path


@dataclass(frozen=True)
class Module:
    """One ``insmod`` of ``modprobe --show-depends``: the module file and its options."""

    path: Path
    options: str = ""


@dataclass(frozen=True)
class VmResult:
    """What one run in the machine gave: the command's exit status and output, and the times."""

    status: int
    output: str
    seconds: float
    """From starting qemu to its exit."""
    boot_seconds: float
    """From starting qemu to the command's start."""


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"[.\-+~]", version))


def find_kernel(boot: Path | None = None, modules: Path | None = None) -> Kernel:
    """The newest ``boot/vmlinuz-<version>`` that has ``modules/<version>``, else a ``VmError``.

    ``boot`` and ``modules``: ``BOOT`` and ``MODULES_ROOT`` unless given.
    """
    boot = BOOT if boot is None else boot
    modules = MODULES_ROOT if modules is None else modules
    found = []
    for image in boot.glob("vmlinuz-*"):
        version = image.name.removeprefix("vmlinuz-")
        if (modules / version / "modules.dep").is_file():
            found.append(Kernel(image, version, modules / version))
    if not found:
        raise VmError(
            f"no kernel image with its modules: no {boot}/vmlinuz-<version> with {modules}/<version>/modules.dep; "
            f"install Debian's kernel: {_INSTALL}"
        )
    kernel = max(found, key=lambda k: _version_key(k.version))
    if not os.access(kernel.image, os.R_OK):
        raise VmError(f"cannot read {kernel.image} (Debian's kernel images are readable by root only): run as root")
    return kernel


def find_qemu(which: Callable[[str], str | None] | None = None) -> Path:
    """``qemu-system-x86_64`` on PATH (``which``: ``shutil.which``), else a ``VmError`` naming the package."""
    found = (which or shutil.which)(QEMU)
    if found is None:
        raise VmError(f"{QEMU} is not on PATH: install qemu-system-x86 ({_INSTALL})")
    return Path(found)


def _program_headers(elf: bytes) -> list[tuple[int, int, int]]:
    """``(type, file offset, file size)`` of each program header of a 64-bit little-endian ELF file; [] if not one."""
    if elf[:4] != b"\x7fELF" or len(elf) < 64 or elf[4] != 2 or elf[5] != 1:
        return []
    phoff, phentsize, phnum = (int.from_bytes(elf[a:b], "little") for a, b in ((32, 40), (54, 56), (56, 58)))
    headers = []
    for index in range(phnum):
        header = elf[phoff + index * phentsize : phoff + (index + 1) * phentsize]
        if len(header) < 40:
            break
        kind, offset, size = (int.from_bytes(header[a:b], "little") for a, b in ((0, 4), (8, 16), (32, 40)))
        headers.append((kind, offset, size))
    return headers


def _is_static_elf(path: Path) -> bool:
    """An x86-64 ELF executable with no program interpreter (PT_INTERP): it runs without a C library."""
    try:
        data = path.read_bytes()
    except OSError:
        return False
    headers = _program_headers(data)
    return bool(headers) and all(kind != 3 for kind, _, _ in headers)


def find_busybox(candidates: Sequence[Path] | None = None) -> Path:
    """A statically linked busybox (the initramfs has no C library), else a ``VmError``.

    ``candidates``: ``BUSYBOX_CANDIDATES`` unless given.
    """
    candidates = BUSYBOX_CANDIDATES if candidates is None else candidates
    for path in candidates:
        if path.is_file() and _is_static_elf(path):
            return path
    raise VmError(
        f"no statically linked busybox at {', '.join(map(str, candidates))}: install busybox-static ({_INSTALL})"
    )


def parse_show_depends(text: str) -> list[Module]:
    """The modules to load, in order, from ``modprobe --show-depends`` output of one or more modules.

    Each ``insmod PATH [OPTIONS]`` line is a module after its dependencies; a module that
    several lines name is loaded once, where it first appears; ``builtin NAME`` lines (a module
    compiled into the kernel) need nothing.
    """
    seen: set[Path] = set()
    modules = []
    for line in text.splitlines():
        words = line.split(maxsplit=2)
        if len(words) < 2 or words[0] != "insmod":
            continue
        path = Path(words[1])
        if path not in seen:
            seen.add(path)
            modules.append(Module(path, words[2].strip() if len(words) > 2 else ""))
    return modules


def _modprobe() -> str:
    for candidate in (shutil.which("modprobe"), "/usr/sbin/modprobe", "/sbin/modprobe"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise VmError(f"modprobe is not installed: install kmod ({_INSTALL})")


def module_order(kernel: Kernel, names: Iterable[str] = MODULES) -> list[Module]:
    """``names`` and their dependencies, in loading order, for ``kernel`` (``modprobe --show-depends``)."""
    modprobe = _modprobe()
    output = []
    for name in names:
        done = subprocess.run(
            [modprobe, "--show-depends", "-S", kernel.version, "-d", str(kernel.modules.parents[2]), name],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise VmError(
                f"kernel {kernel.version} has no module {name} ({done.stderr.strip()}): "
                f"reinstall its modules (apt-get install --reinstall linux-image-{kernel.version})"
            )
        output.append(done.stdout)
    return parse_show_depends("\n".join(output))


def _module_bytes(path: Path) -> bytes:
    """A module file's contents, decompressed (busybox's insmod is given plain ``.ko`` files)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".zst":
        zstd = shutil.which("zstd")
        if zstd is None:
            raise VmError(f"{path} is zstd-compressed: install zstd (apt-get install zstd)")
        return subprocess.run([zstd, "-dc", str(path)], capture_output=True, check=True).stdout
    return data


def _module_name(path: Path) -> str:
    name = path.name
    for suffix in (".xz", ".gz", ".zst"):
        name = name.removesuffix(suffix)
    return name


# The newc cpio format (the kernel's initramfs format), written here: no cpio or root needed.
def _cpio_entry(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0), ino: int = 0) -> bytes:
    encoded = name.encode() + b"\0"
    fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(encoded), 0)
    header = b"070701" + b"".join(f"{value:08x}".encode() for value in fields)
    entry = header + encoded
    entry += b"\0" * (-len(entry) % 4)
    return entry + data + b"\0" * (-len(data) % 4)


def cpio_archive(entries: Iterable[tuple[str, int, bytes]], devices: Iterable[tuple[str, int, int, int]] = ()) -> bytes:
    """A newc cpio archive of ``(name, mode, data)`` entries (directories, files, symlinks) and device nodes.

    ``devices``: ``(name, mode, major, minor)``. The archive ends with its trailer, so archives
    can be concatenated (the kernel unpacks each in turn).
    """
    parts = []
    ino = 1
    for name, mode, data in entries:
        parts.append(_cpio_entry(name, mode, data, ino=ino))
        ino += 1
    for name, mode, major, minor in devices:
        parts.append(_cpio_entry(name, mode, rdev=(major, minor), ino=ino))
        ino += 1
    parts.append(_cpio_entry("TRAILER!!!", 0))
    return b"".join(parts)


_COMPRESSED_KERNELS = ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"))


def _decompress_prefix(data: bytes, kind: str) -> bytes | None:
    """The stream of ``kind`` at the start of ``data`` decompressed (trailing bytes ignored), or None."""
    try:
        if kind == "xz":
            return lzma.LZMADecompressor().decompress(data)
        if kind == "gzip":
            return zlib.decompressobj(wbits=31).decompress(data)
    except (lzma.LZMAError, zlib.error):
        return None
    zstd = shutil.which("zstd")
    if zstd is None:
        return None
    done = subprocess.run([zstd, "-dc"], input=data, capture_output=True)
    return done.stdout or None


def has_pvh_note(elf: bytes) -> bool:
    """Whether an x86-64 ELF kernel has the PVH entry point note (``Xen``, XEN_ELFNOTE_PHYS32_ENTRY, 18)."""
    for kind, offset, size in _program_headers(elf):
        if kind != 4:  # PT_NOTE
            continue
        notes, at = elf[offset : offset + size], 0
        while at + 12 <= len(notes):
            namesz, descsz, note = (int.from_bytes(notes[at + i : at + i + 4], "little") for i in (0, 4, 8))
            if notes[at + 12 : at + 12 + namesz].rstrip(b"\0") == b"Xen" and note == 18:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def boot_image(kernel: Kernel, cache: Path = CACHE) -> Path:
    """What qemu boots: the uncompressed ELF kernel (cached), when ``kernel.image`` holds one with a PVH entry.

    qemu starts such an ELF at its PVH entry point, which spares the emulated CPU the
    decompression of the bzImage (Debian's: xz, some 10 s of the boot). Otherwise the image itself.
    """
    elf, key_file = cache / f"vmlinux-{kernel.version}", cache / f"vmlinux-{kernel.version}.json"
    key = _stat_key(kernel.image)
    with contextlib.suppress(OSError, ValueError):
        if elf.is_file() and json.loads(key_file.read_text()) == key:
            return elf
    data = kernel.image.read_bytes()
    for magic, kind in _COMPRESSED_KERNELS:
        at = -1
        for _ in range(4):  # the payload's stream is the first match; a few more in case of a chance match
            at = data.find(magic, at + 1)
            if at < 0:
                break
            found = _decompress_prefix(data[at:], kind)
            if found is not None and has_pvh_note(found):
                cache.mkdir(parents=True, exist_ok=True)
                partial = elf.with_suffix(".partial")
                partial.write_bytes(found)
                partial.replace(elf)
                key_file.write_text(json.dumps(key) + "\n")
                return elf
    return kernel.image


def _stat_key(path: Path) -> list[object]:
    stat = path.stat()
    return [str(path), stat.st_size, stat.st_mtime_ns]


def build_initramfs(kernel: Kernel, busybox: Path, cache: Path = CACHE) -> Path:
    """The cached base initramfs for ``kernel`` (busybox, modules, ``/init``), built when missing or stale.

    Its key (``initramfs.json``) names the kernel image, each module file, busybox (paths, sizes,
    modification times) and a digest of the init script; a different key rebuilds it.
    """
    modules = module_order(kernel)
    key = {
        "kernel": _stat_key(kernel.image),
        "version": kernel.version,
        "modules": [[*_stat_key(module.path), module.options] for module in modules],
        "busybox": _stat_key(busybox),
        "init": hashlib.sha256(INIT_SCRIPT.encode()).hexdigest(),
    }
    archive, key_file = cache / "initramfs.cpio", cache / "initramfs.json"
    with contextlib.suppress(OSError, ValueError):
        if archive.is_file() and json.loads(key_file.read_text()) == key:
            return archive
    entries: list[tuple[str, int, bytes]] = [
        (directory, 0o040755, b"") for directory in ("bin", "dev", "proc", "sys", "modules", "mnt", "tmp")
    ]
    entries.append(("bin/busybox", 0o100755, busybox.read_bytes()))
    entries.append(("bin/sh", 0o120777, b"busybox"))
    entries.append(("init", 0o100755, INIT_SCRIPT.encode()))
    order = []
    for module in modules:
        name = _module_name(module.path)
        entries.append((f"modules/{name}", 0o100644, _module_bytes(module.path)))
        order.append(f"{name} {module.options}".rstrip())
    entries.append(("modules.order", 0o100644, "".join(line + "\n" for line in order).encode()))
    data = cpio_archive(entries, devices=[("dev/console", 0o020600, 5, 1), ("dev/null", 0o020666, 1, 3)])
    cache.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(archive)
    key_file.write_text(json.dumps(key, indent=1) + "\n")
    return archive


def command_script(command: Sequence[str], root: Path = ROOT) -> str:
    """The shell script the guest runs: into ``root``, then ``command`` (its status is the script's)."""
    return f"cd {shlex.quote(str(root))} || exit {HARNESS_STATUS}\numask 022\nexec {shlex.join(command)}\n"


def run_archive(nonce: str, command: Sequence[str], out: Path | None, root: Path = ROOT, columns: int = 120) -> bytes:
    """The per-run archive appended to the base initramfs: ``/run.conf`` and ``/command.sh``."""
    conf = (
        f"NONCE={nonce}\nROOT={shlex.quote(str(root))}\nOUT={shlex.quote(str(out) if out else '')}\n"
        f"COLUMNS={int(columns)}\n"
    )
    return cpio_archive(
        [("run.conf", 0o100644, conf.encode()), ("command.sh", 0o100755, command_script(command, root).encode())]
    )


def parse_status(line: str, nonce: str) -> int | None:
    """The command's exit status if ``line`` is this run's status marker (``nonce``), else None.

    A line is the marker only whole (after the serial console's carriage returns are stripped)
    and only with this run's nonce, so that the command's own output cannot fake it.
    """
    match = _STATUS_LINE.match(line.rstrip("\r\n"))
    if match is None or match["nonce"] != nonce:
        return None
    return int(match["status"])


def _is_marker(line: str, pattern: re.Pattern[str], nonce: str) -> re.Match[str] | None:
    match = pattern.match(line.rstrip("\r\n"))
    return match if match is not None and match["nonce"] == nonce else None


def qemu_command(
    qemu: Path,
    image: Path,
    initramfs: Path,
    memory_mib: int,
    cpus: int,
    out: Path | None,
) -> list[str]:
    """The qemu command line: TCG, no devices but the serial console and the 9p shares."""
    command = [
        str(qemu),
        "-accel",
        "tcg,thread=multi",
        "-cpu",
        "max",
        "-smp",
        str(cpus),
        "-m",
        str(memory_mib),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        str(image),
        "-initrd",
        str(initramfs),
        "-append",
        " ".join(KERNEL_COMMAND_LINE),
        "-fsdev",
        "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device",
        "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot",
    ]
    if out is not None:
        command += [
            "-fsdev",
            f"local,id=out,path={out},security_model=none,multidevs=remap",
            "-device",
            "virtio-9p-pci,fsdev=out,mount_tag=out",
        ]
    return command


def _prepare_out(out: Path, cache: Path) -> Path:
    """``out`` made, and emptied when it lies in ``cache`` (a folder elsewhere is used as it is)."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if out.is_relative_to(cache.resolve()) and out != cache.resolve():
        for entry in out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return out


@contextlib.contextmanager
def _one_machine(cache: Path) -> Iterator[None]:
    """Hold ``cache/lock`` while a machine runs: a second run at once is refused (they share the files)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise VmError(f"another machine of this tool is running ({cache / 'lock'}); run one at a time") from None
        yield


@dataclass
class _Console:
    """What the guest's console said: the times, the command's output, its status or init's error."""

    nonce: str
    started: float
    echo: TextIO | None
    booted: float | None = None
    status: int | None = None
    error: str | None = None
    timed_out: bool = False
    output: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def line(self, line: str) -> None:
        """One line of the console (carriage returns removed)."""
        self.lines.append(line)
        if self.booted is None:
            if _is_marker(line, _START_LINE, self.nonce):
                self.booted = time.monotonic() - self.started
            elif match := _is_marker(line, _ERROR_LINE, self.nonce):
                self.error = match["message"]
        elif self.status is None:
            self.status = parse_status(line, self.nonce)
            if self.status is None:
                self.output.append(line)
                if self.echo is not None:
                    self.echo.write(line + "\n")
                    self.echo.flush()


def _read_console(process: subprocess.Popen[bytes], console: _Console, deadline: float, log: TextIO) -> None:
    """Read qemu's output (the serial console) line by line until it closes or ``deadline`` passes."""
    assert process.stdout is not None
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                console.timed_out = True
                return
            if not selector.select(min(left, 1.0)):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            buffer += chunk if chunk else b"\n" if buffer else b""
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", errors="replace").replace("\r", "")
                log.write(line + "\n")
                console.line(line)
            log.flush()
            if not chunk:
                return


def run_in_vm(
    command: Sequence[str],
    timeout: float = DEFAULT_TIMEOUT,
    memory_mib: int = DEFAULT_MEMORY_MIB,
    cpus: int = DEFAULT_CPUS,
    out: Path | None = DEFAULT_OUT,
    echo: TextIO | None = None,
    cache: Path = CACHE,
) -> VmResult:
    """Boot the machine, run ``command`` in the repository root there, power off; its status and output.

    ``out``: a folder here shared writable as ``$OUT`` (emptied first when it lies in ``cache``;
    None: no share). ``echo``: where the command's output is written as it comes (None: only
    returned). Raises ``VmTimeout`` (qemu killed) after ``timeout`` seconds, ``VmError`` when the
    machine could not run the command (``cache/console.log`` has the guest's whole console).
    """
    if not command:
        raise VmError("no command to run")
    qemu, kernel, busybox = find_qemu(), find_kernel(), find_busybox()
    with _one_machine(cache):
        base = build_initramfs(kernel, busybox, cache)
        image = boot_image(kernel, cache)
        if out is not None:
            out = _prepare_out(out, cache)
        nonce = secrets.token_hex(8)
        columns = shutil.get_terminal_size((120, 24)).columns
        initramfs = cache / "run-initramfs.cpio"
        initramfs.write_bytes(base.read_bytes() + run_archive(nonce, command, out, ROOT, columns))
        console_log = cache / "console.log"
        console = _Console(nonce, time.monotonic(), echo)
        process = subprocess.Popen(
            qemu_command(qemu, image, initramfs, memory_mib, cpus, out),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            with console_log.open("w", encoding="utf-8", errors="replace") as log:
                _read_console(process, console, console.started + timeout, log)
            if not console.timed_out:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=30)  # it powers off after the status line
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdout is not None:
                process.stdout.close()
    seconds = time.monotonic() - console.started
    tail = "\n".join(console.lines[-20:])
    if console.timed_out:
        where = "the command" if console.booted is not None else "the boot"
        raise VmTimeout(
            f"timed out after {timeout:g} s during {where}; qemu was killed (console: {console_log})\n{tail}"
        )
    if console.error is not None:
        raise VmError(f"the guest's init failed: {console.error} (console: {console_log})\n{tail}")
    if console.status is None:
        raise VmError(
            f"the guest stopped without reporting the command's status (qemu exit {process.returncode}; "
            f"console: {console_log}):\n{tail}"
        )
    return VmResult(console.status, "".join(line + "\n" for line in console.output), seconds, console.booted or 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``python tools/cgroup2_vm.py [options] -- COMMAND...``; the command's exit status."""
    parser = argparse.ArgumentParser(
        description="Run one command, as root, in the repository root of a qemu machine whose kernel mounts "
        "only cgroup v2 (this machine's files, read-only, under a tmpfs overlay).",
        epilog=f"exit status: the command's; {TIMEOUT_STATUS}: timed out; {HARNESS_STATUS}: the machine could "
        "not run it",
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds, boot included (%(default)s)")
    parser.add_argument("--memory", type=int, default=DEFAULT_MEMORY_MIB, help="guest memory, MiB (%(default)s)")
    parser.add_argument("--cpus", type=int, default=DEFAULT_CPUS, help="guest CPUs (%(default)s)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="folder shared writable as $OUT, emptied first (%(default)s)"
    )
    parser.add_argument("--no-out", action="store_true", help="no writable share")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: python tools/cgroup2_vm.py [options] -- COMMAND...")
    try:
        result = run_in_vm(
            command,
            timeout=args.timeout,
            memory_mib=args.memory,
            cpus=args.cpus,
            out=None if args.no_out else args.out,
            echo=sys.stdout,
        )
    except VmTimeout as error:
        print(f"cgroup2-vm: {error}", file=sys.stderr)
        return TIMEOUT_STATUS
    except VmError as error:
        print(f"cgroup2-vm: {error}", file=sys.stderr)
        return HARNESS_STATUS
    print(
        f"cgroup2-vm: booted in {result.boot_seconds:.1f} s; the command exited with status {result.status}; "
        f"{result.seconds:.1f} s in all",
        file=sys.stderr,
    )
    return result.status


if __name__ == "__main__":
    sys.exit(main())
