"""tools/cgroup2_vm.py's parts that need no qemu: module order, cpio, markers, the errors for what is missing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tools import cgroup2_vm
from tools.cgroup2_vm import Module, VmError

SHOW_DEPENDS = """\
insmod /lib/modules/6.1.0-57-amd64/kernel/drivers/virtio/virtio_ring.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/drivers/virtio/virtio.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/drivers/virtio/virtio_pci.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/drivers/virtio/virtio_ring.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/drivers/virtio/virtio.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/net/9p/9pnet.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/net/9p/9pnet_virtio.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/net/9p/9pnet.ko
insmod /lib/modules/6.1.0-57-amd64/kernel/fs/9p/9p.ko.xz  debug=1
builtin tmpfs
insmod /lib/modules/6.1.0-57-amd64/kernel/fs/overlayfs/overlay.ko
"""


def test_modules_load_after_their_dependencies_once_each() -> None:
    modules = cgroup2_vm.parse_show_depends(SHOW_DEPENDS)
    names = [cgroup2_vm._module_name(m.path) for m in modules]
    assert names == [
        "virtio_ring.ko",
        "virtio.ko",
        "virtio_pci.ko",
        "9pnet.ko",
        "9pnet_virtio.ko",
        "9p.ko",
        "overlay.ko",
    ]
    assert modules[5] == Module(Path("/lib/modules/6.1.0-57-amd64/kernel/fs/9p/9p.ko.xz"), "debug=1")
    assert cgroup2_vm.parse_show_depends("builtin overlay\n") == []


def test_the_status_marker_counts_only_whole_and_with_this_runs_nonce() -> None:
    nonce = "0123abcd"
    assert cgroup2_vm.parse_status(f"CGROUP2-VM {nonce} status 0\r\n", nonce) == 0
    assert cgroup2_vm.parse_status(f"CGROUP2-VM {nonce} status 137", nonce) == 137
    assert cgroup2_vm.parse_status("CGROUP2-VM ffff0000 status 0", nonce) is None  # another run's (or a fake)
    assert cgroup2_vm.parse_status(f"echo CGROUP2-VM {nonce} status 0", nonce) is None
    assert cgroup2_vm.parse_status(f"CGROUP2-VM {nonce} status x", nonce) is None


def test_the_console_splits_boot_output_and_status() -> None:
    console = cgroup2_vm._Console("ab12", 0.0, None)
    for line in ["[    0.1] boot", "CGROUP2-VM ab12 start", "hello", "CGROUP2-VM ab12 status 3", "reboot"]:
        console.line(line)
    assert (console.output, console.status, console.error) == (["hello"], 3, None)
    assert console.booted is not None

    failed = cgroup2_vm._Console("ab12", 0.0, None)
    failed.line("CGROUP2-VM ab12 init-error cannot mount the overlay")
    assert failed.error == "cannot mount the overlay" and failed.status is None


def _cpio_names(archive: bytes) -> dict[str, tuple[int, bytes]]:
    """name -> (mode, data) of a newc archive (the test's own reader)."""
    entries: dict[str, tuple[int, bytes]] = {}
    at = 0
    while True:
        assert archive[at : at + 6] == b"070701"
        fields = [int(archive[at + 6 + 8 * i : at + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = fields[1], fields[6], fields[11]
        name = archive[at + 110 : at + 110 + namesize - 1].decode()
        at += 110 + namesize
        at += -at % 4
        if name == "TRAILER!!!":
            return entries
        entries[name] = (mode, archive[at : at + size])
        at += size + (-size % 4)


def test_the_per_run_archive_carries_the_command_quoted_and_the_settings() -> None:
    archive = cgroup2_vm.run_archive("ab12", ["python", "-c", "print('a b')"], Path("/r o/out"), Path("/repo"))
    entries = _cpio_names(archive)
    mode, script = entries["command.sh"]
    assert stat.S_ISREG(mode)
    assert script.decode() == "cd /repo || exit 125\numask 022\nexec python -c 'print('\"'\"'a b'\"'\"')'\n"
    assert entries["run.conf"][1].decode().splitlines()[:3] == ["NONCE=ab12", "ROOT=/repo", "OUT='/r o/out'"]


def test_the_initramfs_holds_busybox_the_modules_in_order_and_init(tmp_path: Path, monkeypatch) -> None:
    modules = tmp_path / "lib" / "modules" / "6.1.0-9-amd64"
    (modules / "kernel").mkdir(parents=True)
    (modules / "kernel" / "virtio.ko").write_bytes(b"virtio")
    (modules / "kernel" / "overlay.ko").write_bytes(b"overlay")
    image = tmp_path / "vmlinuz-6.1.0-9-amd64"
    image.write_bytes(b"kernel")
    busybox = tmp_path / "busybox"
    busybox.write_bytes(b"busybox")
    order = [Module(modules / "kernel" / "virtio.ko"), Module(modules / "kernel" / "overlay.ko", "x=1")]
    monkeypatch.setattr(cgroup2_vm, "module_order", lambda kernel: order)
    kernel = cgroup2_vm.Kernel(image, "6.1.0-9-amd64", modules)
    cache = tmp_path / "cache"

    archive = cgroup2_vm.build_initramfs(kernel, busybox, cache)

    entries = _cpio_names(archive.read_bytes())
    assert entries["modules.order"][1] == b"virtio.ko\noverlay.ko x=1\n"
    assert entries["bin/busybox"][1] == b"busybox" and entries["init"][1] == cgroup2_vm.INIT_SCRIPT.encode()
    assert stat.S_ISCHR(entries["dev/console"][0])
    built = archive.stat().st_mtime_ns
    assert cgroup2_vm.build_initramfs(kernel, busybox, cache).stat().st_mtime_ns == built  # cached
    image.write_bytes(b"a new kernel")  # another kernel: built again, with a new key
    assert _cpio_names(cgroup2_vm.build_initramfs(kernel, busybox, cache).read_bytes()) == entries
    assert json.loads((cache / "initramfs.json").read_text())["kernel"][1] == len(b"a new kernel")


def test_the_newest_kernel_with_modules_is_found(tmp_path: Path) -> None:
    boot, modules = tmp_path / "boot", tmp_path / "modules"
    boot.mkdir()
    for version in ("6.1.0-9-amd64", "6.1.0-10-amd64", "6.12.0-1-amd64"):
        (boot / f"vmlinuz-{version}").write_bytes(b"")
    for version in ("6.1.0-9-amd64", "6.1.0-10-amd64"):  # 6.12's modules are not installed
        (modules / version).mkdir(parents=True)
        (modules / version / "modules.dep").write_text("")
    kernel = cgroup2_vm.find_kernel(boot, modules)
    assert (kernel.version, kernel.image, kernel.modules) == (
        "6.1.0-10-amd64",
        boot / "vmlinuz-6.1.0-10-amd64",
        modules / "6.1.0-10-amd64",
    )


def test_what_is_missing_is_named_with_its_package(tmp_path: Path, monkeypatch, capsys) -> None:
    with pytest.raises(VmError, match="linux-image-amd64"):
        cgroup2_vm.find_kernel(tmp_path, tmp_path)
    with pytest.raises(VmError, match="qemu-system-x86"):
        cgroup2_vm.find_qemu(lambda name: None)
    dynamic = tmp_path / "busybox"
    dynamic.write_bytes(b"#!/bin/sh\n")
    with pytest.raises(VmError, match="busybox-static"):
        cgroup2_vm.find_busybox([dynamic, tmp_path / "absent"])

    monkeypatch.setattr(cgroup2_vm.shutil, "which", lambda name: None)
    assert cgroup2_vm.main(["--", "true"]) == cgroup2_vm.HARNESS_STATUS
    assert "apt-get install qemu-system-x86" in capsys.readouterr().err

    monkeypatch.setattr(cgroup2_vm.shutil, "which", lambda name: "/usr/bin/qemu-system-x86_64")
    monkeypatch.setattr(cgroup2_vm, "BOOT", tmp_path / "no-boot")
    assert cgroup2_vm.main(["--timeout", "5", "--", "true"]) == cgroup2_vm.HARNESS_STATUS
    assert "linux-image-amd64" in capsys.readouterr().err


def test_a_command_is_required(capsys) -> None:
    with pytest.raises(SystemExit) as raised:
        cgroup2_vm.main(["--timeout", "5"])
    assert raised.value.code == 2
    assert "no command" in capsys.readouterr().err


def _elf(notes: bytes, interpreter: bool = False) -> bytes:
    """A minimal x86-64 ELF file: a PT_NOTE program header over ``notes`` (and a PT_INTERP one)."""
    headers = [(4, 64 + 56 * 2, len(notes))] + ([(3, 0, 0)] if interpreter else [(1, 0, 0)])
    elf = bytearray(64)
    elf[:6] = b"\x7fELF\x02\x01"
    elf[32:40] = (64).to_bytes(8, "little")
    elf[54:56] = (56).to_bytes(2, "little")
    elf[56:58] = len(headers).to_bytes(2, "little")
    for kind, offset, size in headers:
        header = bytearray(56)
        header[0:4] = kind.to_bytes(4, "little")
        header[8:16] = offset.to_bytes(8, "little")
        header[32:40] = size.to_bytes(8, "little")
        elf += header
    return bytes(elf) + notes


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def _note(name: bytes, kind: int, desc: bytes) -> bytes:
    """One ELF note: sizes, type, the name (with its NUL) and the description, each padded to 4 bytes."""
    sizes = b"".join(n.to_bytes(4, "little") for n in (len(name) + 1, len(desc), kind))
    return sizes + _padded(name + b"\0") + _padded(desc)


def test_a_kernel_with_the_pvh_note_is_booted_as_elf_and_busybox_must_be_static(tmp_path: Path) -> None:
    assert cgroup2_vm.has_pvh_note(_elf(_note(b"GNU", 3, b"x" * 20) + _note(b"Xen", 18, b"\0" * 4)))
    assert not cgroup2_vm.has_pvh_note(_elf(_note(b"Xen", 6, b"linux")))
    assert not cgroup2_vm.has_pvh_note(b"MZ not an ELF file")
    static, dynamic = tmp_path / "static", tmp_path / "dynamic"
    static.write_bytes(_elf(b""))
    dynamic.write_bytes(_elf(b"", interpreter=True))
    assert cgroup2_vm.find_busybox([dynamic, static]) == static
