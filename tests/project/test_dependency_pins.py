"""The three descriptions of the environment agree: pyproject, environment.yml, the lock."""

import importlib.util
import tomllib

import yaml
from packaging.version import Version

from tests.support.paths import ROOT


def _pins(requirements):
    pins = {}
    for line in requirements:
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        assert version, f"{line!r} is not pinned with =="
        pins[name.lower().replace("_", "-")] = version
    return pins


PYPROJECTS = [ROOT / "pyproject.toml", ROOT / "grading" / "pyproject.toml"]  # course_utils, the grader


def _pyproject_pins():
    pins = {}
    for path in PYPROJECTS:
        project = tomllib.loads(path.read_text())["project"]
        requirements = list(project["dependencies"])
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        for name, version in _pins(requirements).items():
            assert pins.setdefault(name, version) == version, f"{path} pins {name}=={version}, another {pins[name]}"
    return pins


def test_environment_yml_matches_pyproject():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    assert "-e ." in pip_section and "-e ./grading" in pip_section
    assert _pins(pip_section) == _pyproject_pins()


def test_the_learners_package_does_not_depend_on_the_grader():
    """What Colab installs (the root project) needs neither nbgrader nor Jupyter."""
    learner = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not set(_pins(learner)) & {"nbgrader", "nbformat", "nbclient", "jupyterlab", "ipykernel"}


def test_lock_contains_every_pin():
    lock = _pins((ROOT / "requirements.lock").read_text().splitlines())
    for name, version in _pyproject_pins().items():
        assert lock.get(name) == version, f"requirements.lock has {name}=={lock.get(name)}, pyproject {version}"


def test_torch_pin_is_the_cpu_file_on_disk():
    # A looser torch requirement would pull a multi-GB CUDA build on the CI machine.
    assert _pyproject_pins()["torch"] == "2.13.0"


def test_gpu_check_installs_what_the_lock_pins():
    """`make gpu-check` installs missing packages on a GPU box itself: the same versions as here."""
    from tools.gpu_check import NEEDED

    lock = _pins((ROOT / "requirements.lock").read_text().splitlines())
    assert _pins(NEEDED.values()).items() <= lock.items()


def test_lock_holds_what_the_graders_extras_pull_in():
    """The cluster and PostgreSQL extras' own requirements are pinned too (a worker installs the lock)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    lock = _pins((ROOT / "requirements.lock").read_text().splitlines())
    extras = tomllib.loads((ROOT / "grading" / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    todo, seen = [name for pins in extras.values() for name in _pins(pins)], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        assert name in lock, f"requirements.lock lacks {name}, which the grader's extras need"
        for text in requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name.lower().replace("_", "-"))


def test_the_grader_distribution_ships_every_subpackage():
    """A folder missing from grading/pyproject.toml's list would be left out of a non-editable install."""
    listed = set(tomllib.loads((ROOT / "grading" / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(("grading", *init.parent.relative_to(ROOT / "grading").parts))
        for init in (ROOT / "grading").rglob("__init__.py")
        if "course" not in init.relative_to(ROOT / "grading").parts
    }
    assert listed == on_disk


def test_no_package_builds_a_parser_in_every_process_that_imports_nbformat():
    """jsonschema 4.25 and later import ``rfc3987-syntax`` (its ``format-nongpl`` extra, which jupyter-events asks
    for), and that import builds Lark Earley parsers for some 35 IRI rules: ``import nbformat`` took 3.2 s on this
    project's development machine (AMD EPYC, 2 cores) and 0.35 s without it, in every ``course`` process, grading
    worker and test that imports nbformat (and some 100 s in the emulated machine of ``tools/cgroup2_vm.py``). No
    Jupyter schema uses the ``iri`` formats it checks (jsonschema issue #1428), so the lock keeps jsonschema 4.24.1,
    the newest release without it, and neither ``rfc3987-syntax`` nor ``lark``."""
    lock = _pins((ROOT / "requirements.lock").read_text().splitlines())
    assert Version(lock["jsonschema"]) < Version("4.25"), "jsonschema 4.25+ imports rfc3987-syntax (see above)"
    assert "rfc3987-syntax" not in lock and "lark" not in lock
    assert importlib.util.find_spec("rfc3987_syntax") is None, "an older install: pip uninstall rfc3987-syntax lark"
