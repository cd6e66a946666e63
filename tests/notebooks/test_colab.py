"""The Colab path: each student notebook, set up and run the way Colab runs it.

A fresh virtual environment gets only what Colab ships and the course needs (torch, numpy,
matplotlib, scikit-learn, tqdm, ipykernel, at the versions of ``requirements.lock``): none
of the course's own packages, no nbgrader, no JupyterLab. A stand-in ``google.colab`` module
is imported at kernel start (as Colab's kernel does), so each notebook's setup cell takes its
Colab branch and runs ``%pip install --no-deps "course-utils @ git+URL"``; the test points
that one URL at a copy of this checkout (the files git would clone) and changes nothing else:
pip, its index and notebook 09's extra install run as they are. Each notebook runs in an
empty folder, as in Colab's ``/content``, in quick mode. Expected: the student version's
test cells fail (no answers yet) and every other cell runs.

This takes minutes (a torch install and every notebook), so it runs in ``make colab-test``
(``.ci/run`` calls it), not in ``make test``.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

import course_utils
from tests.support.nbtools import error_of, exercise_problems
from tests.support.paths import ROOT
from tools.repo_url import repository_url

RELEASED = sorted((ROOT / "grading" / "course" / "release").glob("*/*.ipynb"))
COLAB_PACKAGES = ["torch", "numpy", "matplotlib", "scikit-learn", "tqdm", "ipykernel"]
FACTS = """
import importlib.metadata, importlib.util, json, sys
import course_utils, torch
print("COLAB-FACTS " + json.dumps({
    "colab": "google.colab" in sys.modules,
    "course_utils": course_utils.__file__,
    "nbgrader": importlib.util.find_spec("nbgrader") is not None,
    "torch": torch.__version__,
    "torchao": importlib.util.find_spec("torchao") and importlib.metadata.version("torchao"),
}))
"""

pytestmark = pytest.mark.skipif(
    os.environ.get("COURSE_COLAB_TEST") != "1",
    reason="builds a fresh environment and runs every notebook (minutes): `make colab-test`",
)


@dataclass
class Colab:
    python: Path
    site_packages: Path
    kernels: Path
    env: dict[str, str]
    checkout: Path

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.python), "-m", "pip", *args], env=self.env, capture_output=True, text=True, check=True
        )

    def distributions(self) -> set[str]:
        return {d["name"].lower() for d in json.loads(self.pip("list", "--format=json").stdout)}


def _copy_checkout(target: Path) -> Path:
    """The files a clone would hold (tracked, plus new files not ignored), as they are now."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(source.read_bytes())
    return target


@pytest.fixture(scope="module")
def colab(tmp_path_factory) -> Colab:
    root = tmp_path_factory.mktemp("colab")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}}
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(root / "stub"),  # google.colab, and nothing else
        IPYTHONDIR=str(root / "ipython"),
        COURSE_QUICK="1",
        MPLBACKEND="agg",
    )
    stub = root / "stub" / "google" / "colab"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('"""Stand-in for Colab\'s module: the setup cells test that it is loaded."""\n')
    startup = root / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-colab.py").write_text("import google.colab  # noqa: F401  (Colab's kernel loads it at start)\n")
    kernel = root / "kernels" / "colab"
    kernel.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (kernel / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "Colab stand-in", "language": "python", "env": env})
    )
    site_packages = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    result = Colab(python, site_packages, root / "kernels", env, _copy_checkout(root / "checkout"))
    result.pip("install", "--quiet", *COLAB_PACKAGES, "-c", str(ROOT / "requirements.lock"))
    return result


def test_the_environment_has_only_what_colab_ships(colab):
    installed = colab.distributions()
    assert {"torch", "numpy", "matplotlib", "scikit-learn", "tqdm", "ipykernel"} <= installed
    assert not installed & {"course-utils", "nbgrader", "jupyterlab", "nbformat", "nbclient", "torchao", "nbval"}


def test_course_utils_installs_without_dependencies_and_brings_no_grading_code(colab):
    before = colab.distributions()
    colab.pip("install", "--quiet", "--no-deps", f"course-utils @ file://{colab.checkout}")
    assert colab.distributions() - before == {"course-utils"}
    modules = sorted(m.name for m in pkgutil.iter_modules(course_utils.__path__))
    check = (
        "import importlib, importlib.metadata, importlib.util, sys, course_utils\n"
        f"for name in {modules!r}: importlib.import_module('course_utils.' + name)\n"
        "[getattr(course_utils, name) for name in course_utils.__all__]\n"
        "assert course_utils.__file__.startswith(sys.argv[1]), course_utils.__file__\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'nbgrader', 'jupyterlab', 'nbformat', 'nbclient'})\n"
        "assert not heavy, heavy\n"
        "files = [str(f) for f in importlib.metadata.files('course-utils') if '.dist-info' not in str(f)]\n"
        "packages = {f.split('/')[0] for f in files}\n"
        "assert packages == {'course_utils'}, packages\n"
        "assert importlib.util.find_spec('grading') is None, 'the grader came with the learner install'\n"
    )
    subprocess.run(
        [str(colab.python), "-c", check, str(colab.site_packages)], env=colab.env, cwd=colab.checkout.parent, check=True
    )
    colab.pip("uninstall", "--yes", "--quiet", "course-utils")  # each notebook's setup cell installs it again


@pytest.mark.parametrize("path", RELEASED, ids=lambda p: p.stem)
def test_the_student_notebook_sets_itself_up_and_runs_as_on_colab(colab, path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    git_url = f"git+{repository_url(ROOT)}"
    assert setup.source.count(git_url) == 1, f"{path.name}: the setup cell does not install course-utils from {git_url}"
    setup.source = setup.source.replace(git_url, f"file://{colab.checkout}")
    nb.cells.append(new_code_cell(FACTS))
    manager = KernelManager(
        kernel_name="colab", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(colab.kernels)])
    )
    NotebookClient(
        nb, km=manager, timeout=300, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    assert error_of(setup) is None, f"the setup cell failed: {error_of(setup)}"
    facts_output = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("output_type") == "stream")
    assert "COLAB-FACTS " in facts_output, f"the check cell did not run: {error_of(nb.cells[-1])}"
    facts = json.loads(facts_output.split("COLAB-FACTS ", 1)[1])
    assert facts["colab"] is True
    assert facts["course_utils"].startswith(str(colab.site_packages)), (
        "course_utils did not come from the setup cell's install"
    )
    assert facts["nbgrader"] is False
    assert facts["torch"].startswith("2.13.0"), "an install in the setup cell replaced torch"
    if path.stem.startswith("09_"):
        assert facts["torchao"], "notebook 09's setup cell did not install torchao"
    problems = exercise_problems(nb)
    assert not problems, f"{path.name} on Colab:\n" + "\n".join(problems)
