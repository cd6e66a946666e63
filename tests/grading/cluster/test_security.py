"""A grading cluster is safe by default: the course's own certificate authority, and no plain TCP beyond loopback.

Fast checks, no cluster started (``tests/grading/cluster/test_cluster.py`` runs a real one over TLS):
``course cluster-certs`` makes an authority and one certificate per role, keys private,
each certificate signed by the authority for what its role does, and prints the flags to
start the scheduler and the workers; ``course autograde --scheduler tcp://...`` to another
machine is refused before any connection, with the reason and the way to TLS, and
``--allow-plain-tcp`` is the explicit way past it.
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from grading.cli import main
from grading.cluster import beyond_loopback, check_address
from grading.coursedir import Course, CourseError
from tests.fixtures.grading import compat_students
from tests.support.processes import free_port

pytest.importorskip("cryptography")


def _load(path: Path):
    from cryptography import x509

    return x509.load_pem_x509_certificate(path.read_bytes())


def test_cluster_certs_makes_an_authority_and_a_private_certificate_per_role(tmp_path, capsys):
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID

    course = tmp_path / "course"
    shutil.copytree(compat_students.COURSE, course)
    assert main(["--course", str(course), "cluster-certs", "--scheduler-host", "10.0.0.1"]) == 0
    out = capsys.readouterr().out
    folder = course / "cluster-certs"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"  # never committed with the course
    for name in ("ca-key.pem", "scheduler-key.pem", "worker-key.pem", "instructor-key.pem"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    ca = _load(folder / "ca.pem")
    assert ca.extensions.get_extension_for_oid(ExtensionOID.BASIC_CONSTRAINTS).value.ca
    for role in ("scheduler", "worker", "instructor"):
        cert = _load(folder / f"{role}.pem")
        assert cert.issuer == ca.subject and "compat-101" in cert.subject.rfc4514_string()
        cert.verify_directly_issued_by(ca)  # raises unless the course's authority signed it
        assert not cert.extensions.get_extension_for_oid(ExtensionOID.BASIC_CONSTRAINTS).value.ca
        usages = set(cert.extensions.get_extension_for_oid(ExtensionOID.EXTENDED_KEY_USAGE).value)
        listens = {ExtendedKeyUsageOID.SERVER_AUTH} if role != "instructor" else set()
        assert usages == {ExtendedKeyUsageOID.CLIENT_AUTH, *listens}, role
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    remote = "/etc/course-grading/tls"
    assert (
        f"dask scheduler --host tls://10.0.0.1 --port 8786 --dashboard-address 127.0.0.1:8787 --no-dashboard "
        f"--tls-ca-file {remote}/ca.pem "
        f"--tls-cert {remote}/scheduler.pem --tls-key {remote}/scheduler-key.pem" in out
    )
    assert (
        f"dask worker tls://10.0.0.1:8786 --nworkers CORES --nthreads 1 --dashboard-address 127.0.0.1:0 "
        f"--no-dashboard --tls-ca-file {remote}/ca.pem "
        f"--tls-cert {remote}/worker.pem --tls-key {remote}/worker-key.pem" in out
    )
    assert "course autograde --scheduler tls://10.0.0.1:8786" in out and "never copy it" in out


def test_cluster_certs_never_overwrites_an_authority_by_accident(tmp_path, capsys):
    out = tmp_path / "certs"
    assert main(["--course", str(tmp_path), "cluster-certs", "--out", str(out)]) == 0
    first = (out / "ca.pem").read_bytes()
    capsys.readouterr()
    assert main(["--course", str(tmp_path), "cluster-certs", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "already holds certificates" in err and "--replace" in err
    assert (out / "ca.pem").read_bytes() == first
    assert main(["--course", str(tmp_path), "cluster-certs", "--out", str(out), "--replace"]) == 0
    assert (out / "ca.pem").read_bytes() != first
    assert stat.S_IMODE((out / "worker-key.pem").stat().st_mode) == 0o600


def _course(tmp_path: Path) -> Course:
    course = Course(tmp_path / "course")
    shutil.copytree(compat_students.COURSE, course.root)
    shutil.copytree(course.folder("source", "ps1"), course.folder("submitted", "ps1", "alice"))
    return course


@pytest.mark.parametrize("address", ["tcp://10.0.0.1:8786", "10.0.0.1:8786", "tcp://grading-head:8786"])
def test_plain_tcp_beyond_loopback_is_refused_with_the_way_to_tls(tmp_path, capsys, address):
    course = _course(tmp_path)
    argv = ["--course", str(course.root), "autograde", "--no-progress", "--scheduler", address]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "neither authenticated nor encrypted" in err and "can run any code on every grading machine" in err
    assert "`course cluster-certs`" in err and "--scheduler tls://" in err and "--allow-plain-tcp" in err
    assert "Traceback" not in err and "cannot reach" not in err  # refused before any connection
    assert not course.autograded.exists() and not (course.root / "gradebook.db").exists()


def test_the_opt_out_and_loopback_pass_the_check_and_tls_needs_a_certificate(tmp_path, capsys):
    course = _course(tmp_path)
    argv = ["--course", str(course.root), "autograde", "--no-progress", "--scheduler-timeout", "1"]
    port = free_port()  # nothing listens there
    assert main([*argv, "--scheduler", f"tcp://192.0.2.1:{port}", "--allow-plain-tcp"]) == 1  # TEST-NET-1
    assert "cannot reach the Dask scheduler at tcp://192.0.2.1" in capsys.readouterr().err  # it tried: checked
    assert main([*argv, "--scheduler", f"tcp://127.0.0.1:{port}"]) == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1" in capsys.readouterr().err
    assert main([*argv, "--scheduler", f"tls://10.0.0.1:{port}"]) == 1  # no cluster-certs/ in the course
    assert "needs the course's TLS certificate: run `course cluster-certs`" in capsys.readouterr().err
    assert main([*argv, "--scheduler", f"tls://10.0.0.1:{port}", "--tls-certs", str(tmp_path / "none")]) == 1
    assert "no certificates in" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the cluster's options without a cluster: a usage error
        main([*argv, "--allow-plain-tcp"])
    assert not course.autograded.exists()


def test_which_addresses_count_as_this_machine():
    assert check_address("tcp://127.0.0.1:8786") == "tcp" and check_address("tcp://[::1]:8786") == "tcp"
    assert check_address("localhost:8786") == "tcp" and check_address("tls://192.0.2.7:8786") == "tls"
    assert check_address("tcp://192.0.2.7:8786", allow_plain=True) == "tcp"
    for address in ("tcp://192.0.2.7:8786", "ws://192.0.2.7:8786", "tcp://[fe80::1]:8786", "tcp://0.0.0.0:8786"):
        with pytest.raises(CourseError, match="refusing"):
            check_address(address)
    assert beyond_loopback(["tcp://127.0.0.1:1", "tcp://192.0.2.7:2", "tls://[::1]:3"]) == ["tcp://192.0.2.7:2"]
