"""The course's own certificate authority, for mutual TLS between ``course``, the Dask scheduler and its workers.

Contract: ``make_certificates(folder, course_id)`` writes, into a new folder (mode 0700, with
a ``.gitignore`` that keeps all of it out of git):

* ``ca.pem``, the course's certificate authority, which every machine of the cluster
  trusts, and ``ca-key.pem``, the key that signs (it never leaves this machine);
* ``scheduler.pem`` / ``scheduler-key.pem``, ``worker.pem`` / ``worker-key.pem`` and
  ``instructor.pem`` / ``instructor-key.pem``: one certificate per role, each signed by the
  course's authority. The scheduler's and the workers' serve and connect (TLS server and
  client use), the instructor's only connects.

Keys are ECDSA P-256, written 0600, unencrypted (a Dask worker started by a service cannot
type a passphrase); certificates 0644. Dask's TLS checks that each side's certificate was
signed by the authority in ``ca.pem`` and not the host name in it (``check_hostname`` is
off: "We expect a dedicated CA for the cluster"), so the authority is the whole trust: any
certificate it signed opens the cluster. An existing folder is refused unless ``replace``
(a new authority: every machine then needs the new files). ``security(folder)`` is the
``distributed.Security`` of the instructor's side; ``instructions`` the commands to copy.
Needs ``cryptography`` (pinned in ``requirements.lock``, the ``cluster`` extra).
"""

from __future__ import annotations

import datetime
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grading.errors import CourseError

__all__ = ["FOLDER_NAME", "ROLES", "Certificates", "make_certificates", "security"]

FOLDER_NAME = "cluster-certs"  # in the course directory, beside the gradebook
ROLES = ("scheduler", "worker", "instructor")
REMOTE_FOLDER = "/etc/course-grading/tls"  # where the printed commands put the files on the other machines


@dataclass(frozen=True)
class Certificates:
    """The files of one course's authority, by name."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca-key.pem"

    def cert(self, role: str) -> Path:
        return self.folder / f"{role}.pem"

    def key(self, role: str) -> Path:
        return self.folder / f"{role}-key.pem"

    def complete(self) -> bool:
        """Whether the folder has what the instructor's side needs (the authority and the instructor's pair)."""
        return all(p.is_file() for p in (self.ca, self.cert("instructor"), self.key("instructor")))


def _write(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (never readable by others, even for a moment)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)  # the umask may have taken bits away from a certificate's 0644


def make_certificates(folder: Path, course_id: str, days: int = 365, replace: bool = False) -> Certificates:
    """A new authority and a certificate per role in ``folder``; see the module docstring."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as error:
        raise CourseError(
            "making certificates needs the `cryptography` package: install the grader's `cluster` extra "
            "(pip install 'course-grading[cluster]'; `make install` does)"
        ) from error
    files = Certificates(folder)
    existing = sorted(p.name for p in folder.glob("*.pem")) if folder.is_dir() else []
    if existing and not replace:
        raise CourseError(
            f"{folder} already holds certificates ({', '.join(existing)}); the machines of the cluster use them. "
            "Pass --replace to make a new authority (then copy the new files to every machine and restart "
            "the scheduler and the workers)"
        )
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    for stale in existing:
        (folder / stale).unlink()
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# private keys of the course's Dask cluster: never commit them\n*\n")

    now = datetime.datetime.now(datetime.UTC)
    pem = serialization.Encoding.PEM

    def key_bytes(key: Any) -> bytes:
        return key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())

    def name(common: str) -> Any:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"course {course_id}"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common)])  # fmt: skip

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"{course_id} grading cluster authority")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # certificate and CRL signing only
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(files.ca_key, key_bytes(ca_key), 0o600)
    _write(files.ca, ca.public_bytes(pem), 0o644)
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if role != "instructor":  # the scheduler and the workers also listen
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(f"{course_id} {role}"))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
            )  # digital signature: the TLS handshake
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(files.key(role), key_bytes(key), 0o600)
        _write(files.cert(role), cert.public_bytes(pem), 0o644)
    return files


def security(folder: Path, role: str = "instructor") -> Any:
    """The ``distributed.Security`` of ``role`` (``instructor``: a client) from a certificate folder; TLS required."""
    from distributed.security import Security

    files = Certificates(folder)
    side = "client" if role == "instructor" else role
    return Security(
        require_encryption=True,
        tls_ca_file=str(files.ca),
        **{f"tls_{side}_cert": str(files.cert(role)), f"tls_{side}_key": str(files.key(role))},
    )


def instructions(files: Certificates, scheduler_host: str = "SCHEDULER-HOST", days: int = 365) -> str:
    """What was made and the commands to copy, with the certificates' paths filled in."""
    remote = REMOTE_FOLDER
    tls = f"--tls-ca-file {remote}/ca.pem --tls-cert {remote}/{{0}}.pem --tls-key {remote}/{{0}}-key.pem"
    here = shlex.quote(str(files.folder))
    return "\n".join(
        [
            f"made the course's certificate authority and three certificates in {files.folder} "
            f"(valid {days} days; keys 0600: keep them private):",
            "  ca.pem                             the authority: every machine of the cluster",
            "  ca-key.pem                         its key: signs certificates; never copy it anywhere",
            "  scheduler.pem, scheduler-key.pem   the scheduler's machine",
            "  worker.pem, worker-key.pem         each grading machine",
            "  instructor.pem, instructor-key.pem this machine: course autograde uses them",
            "",
            f"1. On the scheduler's machine, as the user that runs it, put ca.pem, scheduler.pem and "
            f"scheduler-key.pem in {remote}/ (keys 0600), then:",
            f"   dask scheduler --host tls://{scheduler_host} --port 8786 --dashboard-address 127.0.0.1:8787 "
            f"--no-dashboard {tls.format('scheduler')}",
            f"2. On each grading machine, as root, put ca.pem, worker.pem and worker-key.pem in {remote}/ "
            "(root-owned, keys 0600), then:",
            f"   dask worker tls://{scheduler_host}:8786 --nworkers CORES --nthreads 1 "
            f"--dashboard-address 127.0.0.1:0 --no-dashboard {tls.format('worker')}",
            "   e.g. from here: scp "
            + " ".join(f"{here}/{n}" for n in ("ca.pem", "worker.pem", "worker-key.pem"))
            + f" root@GRADING-HOST:{remote}/",
            "   (Dask starts an HTTP server in each process even with --no-dashboard: --dashboard-address keeps it",
            "   on 127.0.0.1. The workers and their nannies listen for TLS on every interface of their machine.)",
            "3. Here, in the course directory (the instructor's certificate is found in this folder):",
            f"   course autograde --scheduler tls://{scheduler_host}:8786",
        ]
    )
