"""Where an nbgrader course directory keeps what, read through nbgrader's own configuration.

Contract: a ``Course`` is a course directory (``root``) plus, for this repository's own
course only, the folder of source notebooks it releases (``notebooks``). Nothing is
created on construction. Its configuration is the one plain ``nbgrader`` would use: the
course's ``nbgrader_config.py`` (and any in Jupyter's config paths), loaded by nbgrader's
application class, so the course id, the directory names and layout, timeouts, the
late-submission plugin and every preprocessor option mean what nbgrader's docs say.
Options nothing reads (``config_problems``: a typo, a misspelt class) are reported on
stderr when the configuration is loaded.

An assignment is a folder of ``source/`` holding one or more notebooks of any name; the
other files beside them (data, images) belong to it too. ``default_course()`` is the
current directory when it holds an ``nbgrader_config.py``, else the repository's
``grading/course/``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

from traitlets.config import Config, Configurable

from grading.errors import CourseError

__all__ = ["REPO_ROOT", "Course", "CourseError", "config_problems", "counted", "default_course", "load_config"]

REPO_ROOT = Path(__file__).resolve().parents[1]
REPO_COURSE = REPO_ROOT / "grading" / "course"
"""This repository's own course directory: its config and the student versions it tracks."""
CONFIG_FILE = "nbgrader_config.py"


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """``count`` with its noun in the right number: ``1 submission``, ``2 submissions``, ``0.5 points``."""
    return f"{count:g} {noun if count == 1 else plural or noun + 's'}"


def load_config(root: Path) -> Config:
    """nbgrader's configuration for the course in ``root``, loaded by nbgrader's own ``NbGrader`` app.

    The app reads ``nbgrader_config.py`` from Jupyter's config paths, the current directory
    and the course directory, and translates outdated option names, exactly as every
    ``nbgrader`` command does. The course directory goes on ``sys.path`` (nbgrader puts the
    current directory there) so that plugins defined beside the config can be imported.
    """
    _put_venv_on_path()
    from nbgrader.apps.baseapp import NbGrader

    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    app = NbGrader(log_level=logging.ERROR)
    # traitlets' default logs an exception raised by the config file and grades with the defaults (another
    # gradebook, other limits): a course whose configuration cannot be read is not graded at all
    app.raise_config_file_errors = True
    try:
        app.initialize([], root=str(root))
    except SystemExit as exit_:  # traitlets exits on a broken config file
        raise CourseError(f"could not load {root / CONFIG_FILE} (see the message above)") from exit_
    except Exception as error:  # an exception raised by the config file itself
        raise CourseError(f"could not load {root / CONFIG_FILE}: {type(error).__name__}: {error}") from error
    config = Config(app.config)
    config.CourseDirectory.root = app.coursedir.root
    problems = _translate_outdated(config) + config_problems(config)
    for problem in problems:
        _warn_once(f"course: warning: nbgrader configuration of {root}: {problem}")
    return config


# Section names nbgrader's own commands translate (``nbgrader autograde`` reads ``AutogradeApp.x``
# as ``Autograde.x``, ...): the steps ``course`` runs through nbgrader's API do not, so it does it here.
_OUTDATED_SECTIONS = {"AutogradeApp": "Autograde", "AssignApp": "GenerateAssignment", "FeedbackApp": "GenerateFeedback"}
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning on stderr, once per process (a course's config is loaded by every step)."""
    if message not in _warned:
        _warned.add(message)
        print(message, file=sys.stderr)


def _translate_outdated(config: Config) -> list[str]:
    """Move the options of outdated section names where nbgrader's commands move them; say so."""
    problems = []
    for old, new in _OUTDATED_SECTIONS.items():
        if config.get(old):
            names = ", ".join(f"{old}.{key}" for key in config[old])
            problems.append(f"{names}: outdated, read as {new} (as nbgrader does); write {new} in the config")
            config[new].merge(config[old])
            del config[old]
    return problems


def _configurables() -> dict[str, list[type[Configurable]]]:
    """Every configurable class nbgrader's commands and ``course`` use, by name."""
    import nbgrader.apps  # noqa: F401  (imports every converter, preprocessor, plugin, exporter they use)

    from grading import feedback_preprocessors, safe_html  # noqa: F401  (HideHiddenTests, TestResults; SafeToRead)

    found: dict[str, list[type[Configurable]]] = {}
    todo: list[type[Configurable]] = [Configurable]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in found.setdefault(sub.__name__, []):
                found[sub.__name__].append(sub)
                todo.append(sub)
    return found


def _options(classes: list[type[Configurable]]) -> set[str]:
    """The options a section sets: the configurable traits of its classes and of their subclasses."""
    names: set[str] = set()
    todo = list(classes)
    while todo:
        cls = todo.pop()
        names |= set(cls.class_trait_names(config=True))
        todo += cls.__subclasses__()
    return names


def config_problems(config: Config) -> list[str]:
    """Options of ``config`` that nothing reads, each with the class and a close match when there is one.

    traitlets warns about an unknown option only when its class is instantiated (so
    ``nbgrader`` warns about some, and only once it gets there); this checks every section
    at once: an option its class (and subclasses) lacks, a section named like a known class
    but misspelt, and an option set outside any class (``c.course_id``). Sections of classes
    nbgrader does not know and that resemble none, such as a late-penalty plugin's, are left
    alone.
    """
    classes = _configurables()
    problems = []
    for section, options in config.items():
        if isinstance(options, Config) and not options:
            continue  # an empty section (nbgrader's own translation of outdated names leaves some)
        if not isinstance(options, Config):
            owners = sorted(
                name
                for name, group in classes.items()
                if any(section in c.class_trait_names(config=True) for c in group)
            )
            where = f"; did you mean {' or '.join(f'c.{o}.{section}' for o in owners[:3])}?" if owners else ""
            problems.append(f"`c.{section}` is set outside any class, so nothing reads it{where}")
        elif section not in classes:
            close = get_close_matches(section, classes, n=1)
            if close:
                problems.append(
                    f"`{section}` is no class nbgrader knows, so its options are ignored; did you mean `{close[0]}`?"
                )
        else:
            known = _options(classes[section])
            for name, value in options.items():
                if name in known or isinstance(value, Config):
                    continue
                matches = get_close_matches(name, known, n=1)
                hint = f"; did you mean `{matches[0]}`?" if matches else ""
                problems.append(f"option `{name}` is not recognized by `{section}`, so it is ignored{hint}")
    return problems


@dataclass(frozen=True)
class Course:
    """An nbgrader course directory (and the notebooks it is released from, for our own course)."""

    root: Path
    notebooks: Path | None = None

    # -- configuration -------------------------------------------------------------------

    @functools.cached_property
    def config(self) -> Config:
        """nbgrader's configuration of this course (see ``load_config``)."""
        return load_config(self.root)

    @functools.cached_property
    def coursedir(self):  # -> nbgrader.coursedir.CourseDirectory (imported lazily: nbgrader is slow to import)
        from nbgrader.coursedir import CourseDirectory

        return CourseDirectory(config=self.config, root=str(self.root))

    @property
    def course_id(self) -> str:
        return self.coursedir.course_id

    @property
    def db_url(self) -> str:
        return self.coursedir.db_url

    @property
    def db_path(self) -> Path | None:
        """The gradebook file, when the gradebook is SQLite (None for a database server)."""
        return Path(self.db_url[len("sqlite:///") :]) if self.db_url.startswith("sqlite:///") else None

    @property
    def db_label(self) -> str:
        """The gradebook's URL as it may be printed: a server URL's password is masked."""
        return _printable_url(self.db_url)

    def hidden_paths(self) -> list[Path]:
        """What a submission's kernel must not see: the course, its notebooks, a PostgreSQL server's sockets.

        A gradebook on a server is out of the kernel's reach over TCP (the sandbox gives it a
        network of its own), but not over the server's Unix socket, a file: at the ``userns``
        level the kernel runs as you, and PostgreSQL's default ``peer`` authentication would let
        it in as you. So the socket folders are hidden too.
        """
        paths = [p for p in (self.root, self.notebooks) if p is not None]
        return paths + [Path(p) for p in _postgres_socket_dirs(self.db_url)]

    def configurable(self, cls, **kwargs):
        """An nbgrader configurable (converter, preprocessor, plugin) built with this course's config."""
        instance = cls(config=self.config, **kwargs)
        instance.log.setLevel(logging.ERROR)
        return instance

    # -- paths ---------------------------------------------------------------------------

    def folder(self, step: str, assignment: str, student: str = ".") -> Path:
        """``<root>/<step>/<student>/<assignment>`` (nbgrader's ``directory_structure``, any step)."""
        directory = getattr(self.coursedir, f"{step}_directory")
        return Path(os.path.normpath(self.coursedir.format_path(directory, student, assignment)))

    def step_root(self, step: str) -> Path:
        """The folder of one step (``source``, ``release``, ``submitted``, ``autograded``, ``feedback``)."""
        return self.root / getattr(self.coursedir, f"{step}_directory")

    @property
    def source(self) -> Path:
        return self.step_root("source")

    @property
    def release(self) -> Path:
        return self.step_root("release")

    @property
    def submitted(self) -> Path:
        return self.step_root("submitted")

    @property
    def autograded(self) -> Path:
        return self.step_root("autograded")

    @property
    def feedback(self) -> Path:
        return self.step_root("feedback")

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    def assignments(self) -> list[str]:
        """Assignments with at least one source notebook, sorted."""
        if not self.source.is_dir():
            return []
        folders = (p for p in self.source.iterdir() if p.is_dir() and not p.name.startswith("."))
        return sorted(p.name for p in folders if self.notebook_names(p))

    @staticmethod
    def notebook_names(folder: Path) -> list[str]:
        """Stems of the notebooks directly in ``folder`` (nbgrader's ``notebook_id`` glob ``*``), sorted."""
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.ipynb") if p.is_file())

    def submissions(self, assignment: str = "*", student: str = "*") -> list[tuple[str, str, Path]]:
        """(student, assignment, folder) for each ``submitted/<student>/<assignment>/`` folder, sorted."""
        pattern = self.folder("submitted", assignment, student)
        regex = re.compile(
            self.coursedir.format_path(
                self.coursedir.submitted_directory, "(?P<student>[^/]+)", "(?P<assignment>[^/]+)", escape=True
            )
            + "$"
        )
        found = []
        for path in sorted(Path("/").glob(str(pattern).lstrip("/"))):
            match = regex.match(os.path.normpath(str(path)))
            if match and path.is_dir() and not match["student"].startswith("."):
                found.append((match["student"], match["assignment"], path))
        return found

    # -- nbgrader ------------------------------------------------------------------------

    def gradebook(self):  # -> nbgrader.api.Gradebook
        """nbgrader's gradebook of this course (use it as a context manager)."""
        _put_venv_on_path()
        from nbgrader.api import Gradebook
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

        try:
            return Gradebook(self.db_url, self.course_id)
        except (OperationalError, ArgumentError, NoSuchModuleError, ImportError) as error:
            hint = ""
            if isinstance(error, (NoSuchModuleError, ImportError)):
                hint = " (its database driver is missing: for PostgreSQL, install the grader's `postgres` extra)"
            raise CourseError(f"cannot open the gradebook {self.db_label}: {_first_line(error)}{hint}") from error

    def api(self):  # -> nbgrader.apps.NbGraderAPI
        """nbgrader's Python API bound to this course."""
        _put_venv_on_path()
        from nbgrader.apps import NbGraderAPI

        api = NbGraderAPI(coursedir=self.coursedir, config=self.config)
        api.log.setLevel(logging.ERROR)
        return api

    def protect(self) -> None:
        """Keep the instructor's files private to their owner (a second wall behind the sandbox).

        Skipped for courses configured ``groupshared`` (their folders are meant for a group).
        """
        if self.coursedir.groupshared:
            return
        replaced = self.root / "submitted_replaced"  # older submissions `collect` kept aside
        for folder in (self.source, self.submitted, replaced, self.autograded, self.feedback, self.exports):
            if folder.is_dir():
                folder.chmod(0o700)
        if self.db_path is not None and self.db_path.exists():
            self.db_path.chmod(0o600)


# libpq's usual socket folders (Debian's, and upstream's default /tmp, which the sandbox replaces anyway)
_PG_SOCKET_DIRS = ("/run/postgresql", "/var/run/postgresql")


def _printable_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (SQLAlchemy's own rendering)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url if "@" not in url else "<an unreadable database URL>"


def _postgres_socket_dirs(url: str) -> list[str]:
    """The Unix socket folders a PostgreSQL gradebook's server may listen on (empty for other databases)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return []
    if parsed.get_backend_name() != "postgresql":
        return []
    hosts = parsed.query.get("host", ())
    named = [hosts] if isinstance(hosts, str) else list(hosts)
    named += [os.environ.get("PGHOST", ""), parsed.host or ""]
    folders = {os.path.realpath(p) for p in [*named, *_PG_SOCKET_DIRS] if p.startswith("/")}
    return sorted(p for p in folders if p not in ("/", "/tmp"))


def _first_line(error: BaseException) -> str:
    """An exception's message without SQLAlchemy's trailing background link and statement."""
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _put_venv_on_path() -> None:
    """nbgrader's gradebook runs ``alembic`` by name: make the running environment's scripts findable."""
    scripts = str(Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


def default_course(root: Path | str | None = None, notebooks: Path | str | None = None) -> Course:
    """The course to work on.

    ``root`` if given; else the current directory when it holds an ``nbgrader_config.py``;
    else the repository's ``grading/course/``. Only the repository's own course releases from
    ``notebooks/`` (or from ``notebooks`` when given).
    """
    if root is not None:
        course_root = Path(root).resolve()
    elif (Path.cwd() / CONFIG_FILE).is_file():
        course_root = Path.cwd().resolve()
    else:
        course_root = REPO_COURSE
    if notebooks is not None:
        source = Path(notebooks).resolve()
    elif course_root == REPO_COURSE:
        source = REPO_ROOT / "notebooks"
    else:
        source = None
    return Course(root=course_root, notebooks=source)
