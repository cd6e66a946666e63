"""A course directory read through nbgrader's own configuration: ids, folder names, typos reported, errors explained.

Unit tests without a kernel or a gradebook process: each course is a ``nbgrader_config.py``
in ``tmp_path``, loaded by nbgrader's application class as ``course`` loads it.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from traitlets.config import Config

from grading.coursedir import REPO_ROOT, Course, CourseError, config_problems, counted, default_course, load_config


def _course(root: Path, *lines: str) -> Course:
    """A course directory whose ``nbgrader_config.py`` holds ``lines`` (after ``c = get_config()``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "nbgrader_config.py").write_text("\n".join(["c = get_config()", *lines, ""]))
    return Course(root)


def test_counted_puts_the_noun_in_the_right_number():
    assert counted(1, "submission") == "1 submission"
    assert counted(2, "submission") == "2 submissions"
    assert counted(0, "point") == "0 points"
    assert counted(0.5, "point") == "0.5 points"
    assert counted(1.0, "point") == "1 point"
    assert counted(3, "child", "children") == "3 children"


def test_a_course_is_nothing_on_disk_until_used(tmp_path):
    course = Course(tmp_path / "new")
    assert course.source == tmp_path / "new" / "source"
    assert course.assignments() == []
    assert not (tmp_path / "new").exists()


def test_course_id_and_folder_names_come_from_the_courses_nbgrader_config(tmp_path):
    course = _course(
        tmp_path / "c",
        'c.CourseDirectory.course_id = "phys-101"',
        'c.CourseDirectory.submitted_directory = "incoming"',
        'c.CourseDirectory.autograded_directory = "graded"',
    )
    assert course.course_id == "phys-101"
    assert course.submitted == course.root / "incoming"
    assert course.folder("autograded", "ps1", "alice") == course.root / "graded" / "alice" / "ps1"
    assert course.folder("source", "ps1") == course.root / "source" / "ps1"
    assert course.db_path == course.root / "gradebook.db"


def test_assignments_are_source_folders_holding_a_notebook(tmp_path):
    course = Course(tmp_path)
    for name, files in {
        "ps2": ["b.ipynb", "a.ipynb"],
        "ps1": ["x.ipynb"],
        "empty": ["data.csv"],
        ".hidden": ["h.ipynb"],
    }.items():
        (course.source / name).mkdir(parents=True)
        for file in files:
            (course.source / name / file).write_text("{}")
    assert course.assignments() == ["ps1", "ps2"]
    assert Course.notebook_names(course.source / "ps2") == ["a", "b"]


def test_a_misspelt_option_is_reported_on_stderr_with_the_close_match(tmp_path, capsys):
    course = _course(tmp_path / "c", 'c.CourseDirectory.course_idd = "phys-101"')
    assert course.course_id == ""  # the typo is ignored, as nbgrader ignores it...
    err = capsys.readouterr().err
    # ...but said, with what was meant
    assert "option `course_idd` is not recognized by `CourseDirectory`" in err
    assert "did you mean `course_id`?" in err


def test_config_problems_finds_typos_in_class_names_options_and_misplaced_options():
    config = Config()
    config.CourseDirectoy.course_id = "x"
    config.HideHiddenTests.placeholdr = "(hidden)"
    config.course_id = "y"
    problems = config_problems(config)
    assert (
        "`CourseDirectoy` is no class nbgrader knows, so its options are ignored; did you mean `CourseDirectory`?"
        in problems
    )
    assert any("`placeholdr`" in p and "did you mean `placeholder`?" in p for p in problems)
    assert any(
        p.startswith("`c.course_id` is set outside any class") and "c.CourseDirectory.course_id" in p for p in problems
    )
    assert len(problems) == 3


def test_config_problems_leaves_correct_options_and_a_plugins_own_section_alone():
    config = Config()
    config.CourseDirectory.course_id = "x"
    config.Execute.timeout = 30
    config.HideHiddenTests.placeholder = "(hidden)"  # ours, known because the module imports it
    config.ClearSolutions.code_stub = {"python": "raise NotImplementedError()"}
    config.OnePointPerDay.days = 3  # a late-penalty plugin's section: a class nbgrader does not know
    assert config_problems(config) == []


def test_outdated_section_names_are_read_as_nbgrader_reads_them_and_reported(tmp_path, capsys):
    config = load_config(_course(tmp_path / "c", "c.AutogradeApp.create_student = False").root)
    assert config.Autograde.create_student is False
    assert "AutogradeApp" not in config
    assert "AutogradeApp.create_student: outdated, read as Autograde" in capsys.readouterr().err


def test_a_config_that_raises_is_a_course_error_naming_the_file(tmp_path):
    course = _course(tmp_path / "c", 'c.CourseDirectory.course_id = "phys-101"', 'raise ValueError("boom")')
    with pytest.raises(CourseError, match=r"could not load .*nbgrader_config\.py: ValueError: boom"):
        load_config(course.root)


def test_an_unopenable_gradebook_is_a_course_error_that_names_it(tmp_path):
    course = _course(tmp_path / "c", f'c.CourseDirectory.db_url = "sqlite:///{tmp_path}/missing/dir/gradebook.db"')
    with pytest.raises(CourseError, match=r"cannot open the gradebook sqlite:///.*/missing/dir/gradebook\.db"):
        course.gradebook()


def test_a_database_servers_password_is_never_printed(tmp_path):
    course = _course(tmp_path / "c", 'c.CourseDirectory.db_url = "postgresql://grader:s3cret@127.0.0.1:1/course"')
    assert "s3cret" not in course.db_label and "grader:***@127.0.0.1" in course.db_label
    assert course.db_path is None
    with pytest.raises(CourseError) as caught:
        course.gradebook()  # no server on port 1, or no driver: either way a message, without the password
    assert "s3cret" not in str(caught.value) and "cannot open the gradebook" in str(caught.value)


def test_a_postgres_gradebooks_socket_folder_is_hidden_from_the_kernel(tmp_path):
    socket = tmp_path / "pgsocket"
    course = _course(tmp_path / "c", f'c.CourseDirectory.db_url = "postgresql://grader@/course?host={socket}"')
    hidden = course.hidden_paths()
    assert course.root in hidden and socket in hidden
    assert Course(tmp_path / "sqlite").hidden_paths() == [tmp_path / "sqlite"]


def test_default_course_is_the_given_root_then_the_current_folder_then_the_repositorys(tmp_path, monkeypatch):
    given = default_course(tmp_path / "x" / ".." / "given")
    assert given.root == (tmp_path / "given").resolve() and given.notebooks is None

    here = _course(tmp_path / "here").root
    monkeypatch.chdir(here)
    assert default_course() == Course(here.resolve(), None)

    monkeypatch.chdir(tmp_path)  # no nbgrader_config.py here
    ours = default_course()
    assert ours.root == REPO_ROOT / "grading" / "course"
    assert ours.notebooks == REPO_ROOT / "notebooks"  # only the repository's course releases from notebooks/
    assert default_course(notebooks=tmp_path).notebooks == tmp_path.resolve()


def test_protect_keeps_the_instructors_folders_private(tmp_path):
    course = Course(tmp_path / "c")
    for folder in (course.source, course.submitted, course.autograded):
        folder.mkdir(parents=True)
        folder.chmod(0o755)
    course.db_path.write_bytes(b"")
    course.db_path.chmod(0o644)
    course.protect()
    assert {stat.S_IMODE(f.stat().st_mode) for f in (course.source, course.submitted, course.autograded)} == {0o700}
    assert stat.S_IMODE(course.db_path.stat().st_mode) == 0o600

    shared = _course(tmp_path / "shared", "c.CourseDirectory.groupshared = True")
    shared.source.mkdir()
    shared.source.chmod(0o775)
    shared.protect()
    assert stat.S_IMODE(shared.source.stat().st_mode) == 0o775  # meant for a group: left alone
