"""How steady notebook 12's measured speed grade is: a class of five, graded again and again.

Run with ``make capstone-benchmark`` (or ``.venv/bin/python tools/capstone_benchmark.py
[--runs 20] [--jobs 2]``). It releases notebook 12 into a throwaway course (with the course's
referee, ``grading/course/capstone_referee.py``, beside its config), submits five answers to
exercise 3 (exercises 1 and 2 solved as in the notebook), each with the tier it is meant for:

* ``reference``: the notebook's own solution (full marks, 10);
* ``compiled``: the same loop with the forward pass and loss under ``torch.compile`` (10);
* ``loader``: batches from ``DataLoader(batch_size=16)``, five mistakes kept (images still
  transformed one at a time, ``.item()`` each step, zeros written, GELU by hand, for-loop
  Adam): half-way (6);
* ``batching``: the whole batch through the model at once, every other mistake kept
  (images fetched one at a time from a ``DataLoader(batch_size=1)`` as well): half-way (6);
* ``baseline``: ``slow_train`` itself (correct, no speed: 2);

then runs ``course autograde --force --jobs N`` ``--runs`` times and prints, per answer, the
points of each run (with the speedup, the reference's speedup in the same rounds and the
share of its gain that decided the points), the spread of each, the measurement's time, and
how often the grader said it could not measure (other work kept taking the measured CPU:
the test keeps its correctness points and is left for manual grading). ``--load N`` first starts N processes
that burn CPU outside the grader (plain busy loops, as another user's work would), for the
whole benchmark: the grade must not move with them. ``--answers`` picks the answers. It is
a measurement, not a test: nothing is asserted. The machine and its load are printed,
because both change the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the grading package, when run without `make install`

from grading.coursedir import Course  # noqa: E402
from grading.release import release  # noqa: E402

NOTEBOOK = REPO / "notebooks" / "12_make_this_training_loop_fast.ipynb"
REFEREE = REPO / "grading" / "course" / "capstone_referee.py"
TEST_CELL = "ex3_fast_train_tests"

COMPILED = '''
@torch.compile
def _loss(model, images, labels):
    return F.cross_entropy(model(images), labels)


def fast_train(task: CapstoneTask, device: torch.device) -> tuple[nn.Module, torch.Tensor]:
    """The reference loop, with the forward pass and the loss compiled (one graph, reused across calls)."""
    from course_utils.capstone import STD_EPS

    device = torch.device(device)
    model = make_model(task, fused_gelu=True).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr, fused=True)
    pixels, labels = task.data()
    x = pixels.float() / 16.0
    images = ((x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + STD_EPS)).to(device)
    labels = labels.to(device)
    losses = torch.empty(task.steps, device=device)
    for step, batch in enumerate(task.batch_order().to(device)):
        loss = _loss(model, images[batch], labels[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
    return model, losses
'''
BATCHING = '''
from torch.utils.data import DataLoader

from course_utils.capstone import DigitsPixels


def fast_train(task: CapstoneTask, device: torch.device) -> tuple[nn.Module, torch.Tensor]:
    """Only the per-sample model calls fixed: images still come one at a time, then go through the model together."""
    device = torch.device(device)
    model = make_model(task).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)
    order = task.batch_order().flatten().tolist()
    samples = iter(DataLoader(DigitsPixels(*task.data()), batch_size=1, sampler=order))
    losses = []
    for _ in range(task.steps):
        items = [next(samples) for _ in range(task.batch_size)]
        images = torch.cat([image for image, _ in items]).to(device)
        labels = torch.cat([label for _, label in items]).to(device)
        for parameter in model.parameters():
            parameter.grad = torch.zeros_like(parameter)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, torch.tensor(losses)
'''
LOADER = '''
from torch.utils.data import DataLoader

from course_utils.capstone import DigitsPixels


def fast_train(task: CapstoneTask, device: torch.device) -> tuple[nn.Module, torch.Tensor]:
    """Batching through DataLoader(batch_size=task.batch_size), five mistakes kept: half-way."""
    device = torch.device(device)
    model = make_model(task).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=task.lr)
    order = task.batch_order().flatten().tolist()
    loader = DataLoader(DigitsPixels(*task.data()), batch_size=task.batch_size, sampler=order)
    losses = []
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        for parameter in model.parameters():
            parameter.grad = torch.zeros_like(parameter)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, torch.tensor(losses)
'''
BASELINE = '''
def fast_train(task: CapstoneTask, device: torch.device) -> tuple[nn.Module, torch.Tensor]:
    """The baseline itself."""
    return slow_train(task, device)
'''
ANSWERS = ("reference", "compiled", "loader", "batching", "baseline")


def _answers(nb: nbformat.NotebookNode) -> dict[str, nbformat.NotebookNode]:
    return {
        c.metadata.nbgrader.grade_id: c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }


def _strip(source: str) -> str:
    return re.sub(r"\n?\s*### (BEGIN|END) SOLUTION", "", source)


def reference_answer() -> str:
    """Notebook 12's own answer to exercise 3, as a learner would submit it."""
    return _strip(_answers(nbformat.read(NOTEBOOK, as_version=4))["ex3_fast_train"].source)


def capstone_course(tmp: Path, submissions: dict[str, str], added: dict[str, tuple[str, str]] | None = None) -> Course:
    """Notebook 12 released into a throwaway course (the referee beside its config), one submission per student.

    Each submission solves exercises 1 and 2 as the notebook does and answers exercise 3 with
    ``submissions[student]``; ``added[student] = (first, last)`` are code cells the learner
    added, after the setup cell and at the end (empty: none). Cells may run 120 s.
    """
    notebooks = tmp / "notebooks"
    notebooks.mkdir()
    shutil.copy(NOTEBOOK, notebooks / NOTEBOOK.name)
    course = Course(root=tmp / "course", notebooks=notebooks)
    course.root.mkdir()
    (course.root / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\nc.Execute.timeout = 120\n")
    shutil.copy(REFEREE, course.root / REFEREE.name)
    release(course)
    name = NOTEBOOK.stem
    released = nbformat.read(course.folder("release", name) / f"{name}.ipynb", as_version=4)
    solved = _answers(nbformat.read(NOTEBOOK, as_version=4))
    for student, ex3 in submissions.items():
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        answers = _answers(nb)
        for grade_id in ("ex1_standardize_images", "ex2_train_step"):
            answers[grade_id].source = _strip(solved[grade_id].source)
        answers["ex3_fast_train"].source = ex3
        first, last = (added or {}).get(student, ("", ""))
        if last:
            nb.cells.append(nbformat.v4.new_code_cell(last))
        if first:
            setup = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
            nb.cells.insert(setup + 1, nbformat.v4.new_code_cell(first))
        folder = course.folder("submitted", name, student)
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{name}.ipynb")
        (folder / "timestamp.txt").write_text("2026-01-01 12:00:00.000000 UTC")
    return course


def _class(tmp: Path, answers: list[str]) -> Course:
    """A course releasing notebook 12, with a submission per answer (``ANSWERS``) in submitted/."""
    variants = {
        "reference": reference_answer(),
        "compiled": COMPILED,
        "loader": LOADER,
        "batching": BATCHING,
        "baseline": BASELINE,
    }
    return capstone_course(tmp, {answer: variants[answer] for answer in answers})


def report_of(course: Course, student: str) -> tuple[float, str]:
    """A student's measured cell of notebook 12: its points and everything it shows (the report, or the error)."""
    name = NOTEBOOK.stem
    return measured_cell(nbformat.read(course.folder("autograded", name, student) / f"{name}.ipynb", as_version=4))


def measured_cell(nb: nbformat.NotebookNode, grade_id: str = TEST_CELL) -> tuple[float, str]:
    """A graded notebook's measured cell ``grade_id``: its points and everything it shows (the report, or the error)."""
    cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)
    points = next((o["data"]["text/plain"] for o in cell.outputs if o.get("output_type") == "execute_result"), "0")
    text = "".join(o.get("text", "") for o in cell.outputs)
    text += "".join(f"{o['ename']}: {o['evalue']}" for o in cell.outputs if o.get("output_type") == "error")
    return float(points), text


NOT_MEASURED = "NOT MEASURED"  # the referee's report when other work kept taking the measured CPU


def _disturbance(text: str) -> str:
    """What a report says other work took from its timed runs: ``"52 ms off 2 runs, 1 left out"``, or ``""``."""
    off = re.search(r"measured CPU for (\d+) ms during (\d+) timed runs", text)
    again = re.search(r"left out of the medians \((\d+) timed runs\)", text)
    parts = [f"{off[1]} ms off {off[2]} runs"] if off else []
    return ", ".join(parts + ([f"{again[1]} left out"] if again else []))


@dataclass(frozen=True)
class Verdict:
    """One student's measured cell, as its report reads."""

    points: float
    speedup: float | None  # over the baseline
    reference: float | None  # the reference solution's speedup in the same rounds
    share: float | None  # of the reference's gain: what decided the points
    seconds: float | None  # the measurement's own time
    error: str  # the first error line, or NOT_MEASURED, or ""
    disturbance: str  # what other work took from the timed runs, in words


def _number(pattern: str, text: str) -> float | None:
    found = re.search(pattern, text)
    return float(found[1]) if found else None


def _verdicts(course: Course, keep: Path | None = None) -> dict[str, Verdict]:
    """Per student: the measured cell's ``Verdict``; with ``keep``, each report is also written there (``NAME.txt``)."""
    name = NOTEBOOK.stem
    found = {}
    for folder in sorted(course.autograded.iterdir()):
        nb = nbformat.read(folder / name / f"{name}.ipynb", as_version=4)
        cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == TEST_CELL)
        text = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            errors = "".join(f"{o['ename']}: {o['evalue']}\n" for o in cell.outputs if o.get("ename"))
            (keep / f"{folder.name}.txt").write_text(text + errors)
        points = next((o["data"]["text/plain"] for o in cell.outputs if o.get("output_type") == "execute_result"), "0")
        error = next((f"{o['ename']}: {o['evalue'].splitlines()[0]}" for o in cell.outputs if o.get("ename")), "")
        if NOT_MEASURED in text:
            error = NOT_MEASURED
            print(f"{folder.name}: could not measure:\n  " + text.strip().replace("\n", "\n  "), flush=True)
        found[folder.name] = Verdict(
            float(points),
            _number(r"speedup ([\d.]+)x", text),
            _number(r"the reference solution ([\d.]+)x in the same rounds", text),
            _number(r"your share of its gain (-?[\d.]+)", text),
            _number(r"measured in \d+ rounds? in (\d+) s", text),
            error,
            _disturbance(text),
        )
    return found


def _spread(values: list[float], unit: str = "", digits: int = 1) -> str:
    """``min / median / max`` of ``values``."""
    if not values:
        return "none"
    return " / ".join(f"{v:.{digits}f}{unit}" for v in (min(values), statistics.median(values), max(values)))


BURN = "import time\nwhile True:\n    time.perf_counter()\n"  # one CPU's worth of somebody else's work


def _load(count: int) -> list[subprocess.Popen]:
    """``count`` busy-loop processes the grader does not control: ordinary priority, any CPU."""
    return [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--load", type=int, default=0, help="CPU-burning processes to run beside the grader")
    parser.add_argument("--answers", default=",".join(ANSWERS), help=f"a comma-separated choice of {ANSWERS}")
    parser.add_argument("--keep-reports", type=Path, help="write each run's reports into this folder (run-N/)")
    args = parser.parse_args()
    answers = [a for a in args.answers.split(",") if a]
    if unknown := sorted(set(answers) - set(ANSWERS)):
        parser.error(f"unknown answers {unknown}; choose from {ANSWERS}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    results: dict[str, list[Verdict]] = {}
    burners = _load(args.load)
    if burners:
        print(f"outside load: {len(burners)} busy-loop processes (ordinary priority, any CPU) for the whole benchmark")
    try:
        with tempfile.TemporaryDirectory(prefix="capstone-benchmark-") as tmp_name:
            course = _class(Path(tmp_name), answers)
            command = [sys.executable, "-m", "grading", "--course", str(course.root), "autograde", "--force"]
            command += ["--jobs", str(args.jobs), "--no-progress"]
            for run in range(args.runs):
                started = time.perf_counter()
                done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
                keep = args.keep_reports / f"run-{run + 1}" if args.keep_reports else None
                if not course.autograded.is_dir():
                    print(done.stdout[-2000:], done.stderr[-3000:], sep="\n")
                    raise SystemExit(f"course autograde graded nothing in run {run + 1}")
                verdicts = _verdicts(course, keep)
                unmeasured = {s for s, v in verdicts.items() if v.error == NOT_MEASURED}
                if done.returncode != 0 and not unmeasured:  # exit 1 is expected when it could not measure
                    print(done.stdout[-2000:], done.stderr[-3000:], sep="\n")
                    raise SystemExit(f"course autograde failed in run {run + 1}")
                for student, verdict in verdicts.items():
                    results.setdefault(student, []).append(verdict)
                line = ", ".join(f"{student} {_brief(v)}" for student, v in sorted(verdicts.items()))
                elapsed = time.perf_counter() - started
                print(f"run {run + 1:2d} ({elapsed:5.0f} s, load {os.getloadavg()[0]:.1f}): {line}", flush=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    print()
    for student, verdicts in sorted(results.items()):
        measured = [v for v in verdicts if v.error != NOT_MEASURED]
        points = Counter(v.points for v in measured)
        tally = ", ".join(f"{p:g} points in {n} runs" for p, n in sorted(points.items(), reverse=True))
        missed = len(verdicts) - len(measured)
        left_out = sum(int(m[1]) for v in verdicts if (m := re.search(r"(\d+) left out", v.disturbance)))
        tally += f"; could not measure in {missed} runs" if missed else ""
        tally += f"; {left_out} disturbed timed runs left out" if left_out else ""
        spread = (
            f"speedup {_spread([v.speedup for v in measured if v.speedup is not None], 'x')}, reference "
            f"{_spread([v.reference for v in measured if v.reference is not None], 'x')}, share "
            f"{_spread([v.share for v in measured if v.share is not None], digits=2)} (min / median / max), "
            f"measured in {_spread([v.seconds for v in measured if v.seconds is not None], ' s', 0)}"
        )
        errors = sorted({v.error for v in verdicts if v.error and v.error != NOT_MEASURED})
        print(f"{student:10s} {tally}; {spread}" + (f"; errors: {errors}" if errors else ""))


def _brief(verdict: Verdict) -> str:
    """One answer's result in a run: ``"6 (5.5x of 12.3x: share 0.68; 24 s)"``."""
    if verdict.error == NOT_MEASURED:
        return f"{verdict.points:g} (not measured)"
    parts = [f"{verdict.speedup or 0:.1f}x"]
    if verdict.reference is not None:
        parts[0] += f" of {verdict.reference:.1f}x: share {verdict.share:.2f}"
    if verdict.seconds is not None:
        parts.append(f"{verdict.seconds:.0f} s")
    if verdict.disturbance:
        parts.append(verdict.disturbance)
    return f"{verdict.points:g} ({'; '.join(parts)})"


if __name__ == "__main__":
    main()
