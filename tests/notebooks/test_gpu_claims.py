"""GPU sentences held to the kept GPU runs (issue 22): tests/gpu_claims/NN.toml against notebooks/gpu-runs/.

The first test checks the course's recorded claims (one test per claims file). The rest check
the checker: on small synthetic runs written here (every way a claim can fail, and every
expression the whitelist refuses), and on the real H200 run, which contradicts sentences the
notebooks of its commit (d393fde) said about it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from course_utils.timing import Comparison, Timing
from tests.support import claims
from tests.support.paths import ROOT
from tools import gpu_runs

H200 = gpu_runs.RUNS_DIR / "h200-torch2.11-d393fde"


@pytest.fixture(scope="module")
def kept() -> list[gpu_runs.KeptRun]:
    return gpu_runs.kept_runs()


@pytest.mark.parametrize("path", claims.claim_files(), ids=lambda p: p.name)
def test_recorded_gpu_claims_hold_on_every_kept_run(path, kept):
    problems = claims.check_file(path, ROOT, kept)
    assert not problems, "\n\n".join(problems)


# --- the kept runs ---------------------------------------------------------------------------------


def test_the_kept_runs_are_in_the_kept_run_layout_and_keep_their_outputs(kept):
    assert H200 in [run.folder for run in kept]
    for run in kept:
        for number in run.notebook_paths:
            nb = run.notebook(number)
            assert any(cell.get("outputs") for cell in nb.cells), f"{run.name}/{number}: outputs stripped"
    h200 = gpu_runs.read_run(H200)
    assert (h200.info["gpu"], h200.info["torch"], h200.info["commit"]) == ("NVIDIA H200", "2.11.0+cu130", "d393fde")
    assert h200.info["one_notebook_at_a_time"] and h200.info["other_gpu_processes"] == []


def test_nothing_takes_the_kept_runs_for_course_notebooks():
    from grading.coursedir import default_course
    from grading.release import _repo_notebooks
    from tests.support.nbtools import NOTEBOOKS

    kept_files = {p.name for p in H200.glob("*.ipynb")}
    assert kept_files and all("gpu-runs" not in str(p) for p in NOTEBOOKS)
    assert all("gpu-runs" not in str(p) for p in _repo_notebooks(default_course()))
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "notebooks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "notebooks/01_run_tensors_on_the_gpu.ipynb::" in collected  # the collection itself worked
    assert "gpu-runs" not in collected, "pytest (nbval) collects the kept runs"
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or "ruff"
    linted = subprocess.run([ruff, "check", "--show-files", "notebooks"], cwd=ROOT, capture_output=True, text=True)
    assert "01_run_tensors_on_the_gpu.ipynb" in linted.stdout and "gpu-runs" not in linted.stdout


# --- reading tables ---------------------------------------------------------------------------------

OLD_TABLE = """\
compiled int8 weight-only: output SQNR 41.2 dB
1 row per call:
on NVIDIA H200
variant                         median     ± IQR/2  speedup
bfloat16                        144 µs      305 ns    1.00x
int8 weight-only, eager         874 µs     1.56 µs    0.16x
int8 weight-only, compiled      281 µs       11 µs    0.51x
"""


def test_a_table_in_the_old_format_is_read():
    (table,) = gpu_runs.parse_tables(OLD_TABLE, cell=30)
    assert table.hardware == "NVIDIA H200" and table.title.endswith("1 row per call:")
    assert table.labels == ["bfloat16", "int8 weight-only, eager", "int8 weight-only, compiled"]
    row = table.row("int8 weight-only, eager")
    assert (row.median, row.half_iqr, row.ratio) == (pytest.approx(874e-6), pytest.approx(1.56e-6), "0.16x")


def test_a_table_in_todays_format_reads_back_what_compare_measured():
    timings = {
        "eager": Timing("eager", (178e-6, 170e-6, 190e-6, 181e-6)),
        "default": Timing("default", (220e-6, 150e-6, 300e-6, 200e-6)),
        "reduce-overhead": Timing("reduce-overhead", (85e-6, 86e-6, 84e-6, 85e-6)),
    }
    comparison = Comparison(timings, baseline="eager", hardware="NVIDIA H200", items_per_call=64)
    text = "batch 8:\n" + comparison.table() + "\nGPU memory still reserved: 4 MiB\n"
    (table,) = gpu_runs.parse_tables(text)
    assert table.labels == list(timings) and table.hardware == "NVIDIA H200" and table.title == "batch 8:"
    for label, timing in timings.items():
        row = table.row(label)
        assert row.median == pytest.approx(timing.median, rel=5e-3)  # printed to three digits
        assert row.spread == pytest.approx(timing.spread, rel=1e-2)
        assert row.noisy == (label == "default")
    assert table.row("default").ratio.endswith("slower") and table.row("eager").ratio == "baseline"


def test_every_table_of_the_h200_run_is_read():
    run = gpu_runs.read_run(H200)
    found = {number: gpu_runs.tables(run.notebook(number)) for number in run.notebook_paths}
    # Counted by hand in the executed notebooks: lines starting with "variant".
    assert {n: len(t) for n, t in found.items()} == {"01": 1, "02": 2, "03": 4, "07": 3, "09": 7, "11": 3}
    (optimizers,) = [t for t in found["11"] if "fused" in t.labels]
    assert optimizers.cell == 32 and optimizers.row("compiled").median == pytest.approx(339e-6)


# --- the checker, on synthetic runs -------------------------------------------------------------------

SENTENCE = "On the kept GPU run, reduce-overhead ran\nabout twice as fast as eager."


def _run_json(**changes) -> dict:
    info = {
        "gpu": "Fake GPU",
        "gpu_memory_mib": 16384,
        "compute_capability": "7.5",
        "driver": "1.0",
        "cpu": "fake, 2 cores",
        "python": "3.12.0",
        "torch": "2.12.0+cu128",
        "cuda": "12.8",
        "torchao": "0.18.0",
        "commit": "abc1234",
        "date": "2026-11-20",
        "quick": False,
        "one_notebook_at_a_time": True,
        "other_gpu_processes": [],
        "notebooks": ["07_x.ipynb"],
    }
    return {**info, **changes}


def _printed(text: str):
    return new_code_cell("run()", outputs=[new_output("stream", name="stdout", text=text)])


def _table(medians: dict[str, float]) -> str:
    return Comparison({k: Timing(k, (v,) * 4) for k, v in medians.items()}, baseline=next(iter(medians))).table()


def _repo(tmp_path: Path, runs: dict[str, list[str]] | None = None) -> Path:
    """A repository with notebook 07 and kept runs (name -> texts printed, one cell each)."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "tests" / "gpu_claims").mkdir(parents=True)
    nb = new_notebook(cells=[new_markdown_cell(f"# 07 · X\n\n{SENTENCE} More text."), new_code_cell("run()")])
    nbformat.write(nb, root / "notebooks" / "07_x.ipynb")
    if runs is None:
        runs = {"gpu-a": ["at batch 8:\n" + _table({"eager": 180e-6, "default": 220e-6, "reduce-overhead": 85e-6})]}
    for name, texts in runs.items():
        folder = root / "notebooks" / "gpu-runs" / name
        folder.mkdir(parents=True)
        nbformat.write(
            new_notebook(cells=[new_markdown_cell("# 07 · X"), *map(_printed, texts)]), folder / "07_x.ipynb"
        )
        (folder / "run.json").write_text(json.dumps(_run_json()))
        (folder / "README.md").write_text("# a run\n")
    return root


def _check(root: Path, toml: str, name: str = "07.toml") -> list[str]:
    path = root / "tests" / "gpu_claims" / name
    path.write_text(toml)
    return claims.check_file(path, root)


def _claim(holds: str, table: str = '["eager", "reduce-overhead"]', sentence: str = SENTENCE, extra: str = "") -> str:
    return f"[[claim]]\nsentence = {json.dumps(sentence)}\ntable = {table}\nholds = {json.dumps(holds)}\n{extra}"


def test_a_claim_that_holds_passes(tmp_path):
    root = _repo(tmp_path)
    assert _check(root, _claim("1.8 < speedup('reduce-overhead') < 2.4 and median('default') > median('eager')")) == []


def test_a_contradicted_claim_fails_naming_the_run_the_sentence_and_the_values(tmp_path):
    root = _repo(tmp_path)
    (problem,) = _check(root, _claim("speedup('reduce-overhead') > 3"))
    first, run, holds = problem.splitlines()
    assert first == f"CONTRADICTED: 07.toml, claim 1: {SENTENCE!r}"
    assert run.startswith("  run gpu-a (Fake GPU, torch 2.12.0+cu128, 2026-11-20, commit abc1234), notebook 07, cell 1")
    assert holds == "  holds = \"speedup('reduce-overhead') > 3\" is false: speedup('reduce-overhead') = 2.12x"


def test_a_claim_is_checked_on_every_matching_run_and_fails_on_the_one_that_contradicts_it(tmp_path):
    fast = _table({"eager": 180e-6, "reduce-overhead": 85e-6})
    slow = _table({"eager": 180e-6, "reduce-overhead": 200e-6})
    root = _repo(tmp_path, {"h200-a": [fast], "t4-b": [slow]})
    (problem,) = _check(root, _claim("speedup('reduce-overhead') > 1.5"))
    assert "run t4-b" in problem and "CONTRADICTED" in problem
    assert _check(root, _claim("speedup('reduce-overhead') > 1.5", extra='runs = "h200-*"')) == []


def test_a_stale_claim_fails(tmp_path):
    root = _repo(tmp_path)
    (no_table,) = _check(root, _claim("speedup('compiled') > 1", table='["eager", "compiled"]'))
    assert no_table.startswith("STALE") and "no table with rows ['eager', 'compiled']" in no_table
    assert "eager, default, reduce-overhead" in no_table  # what it did print
    (no_row,) = _check(root, _claim("speedup('max-autotune') > 1"))
    assert no_row.startswith("STALE") and "no row 'max-autotune'" in no_row
    (no_match,) = _check(
        root,
        f'[[claim]]\nsentence = {json.dumps(SENTENCE)}\noutput = "cudnn (?P<r>[0-9.]+)x"\nholds = "value(\'r\') > 1"',
    )
    assert no_match.startswith("STALE") and "nothing in its outputs matches" in no_match


def test_a_claim_no_kept_run_matches_fails(tmp_path):
    root = _repo(tmp_path)
    (problem,) = _check(root, _claim("speedup('reduce-overhead') > 1", extra='runs = "t4-*"'))
    assert problem.startswith("UNCHECKED") and "no GPU printed it" in problem and "gpu-a" in problem
    shutil.rmtree(root / "notebooks" / "gpu-runs")
    (problem,) = _check(root, _claim("speedup('reduce-overhead') > 1"))
    assert problem.startswith("UNCHECKED")


def test_a_sentence_no_longer_in_the_notebook_fails(tmp_path):
    root = _repo(tmp_path)
    (problem,) = _check(root, _claim("speedup('reduce-overhead') > 1", sentence="reduce-overhead ran 3x as fast"))
    assert problem.startswith("GONE") and "'reduce-overhead ran 3x as fast'" in problem and "07_x.ipynb" in problem
    # Whitespace is collapsed (the sentence above spans a line break), but the words must stand.
    assert _check(root, _claim("speedup('reduce-overhead') > 1", sentence=" ".join(SENTENCE.split()))) == []


def test_a_claims_file_for_a_missing_notebook_or_misnamed_fails(tmp_path):
    root = _repo(tmp_path)
    (missing,) = _check(root, _claim("speedup('reduce-overhead') > 1"), name="13.toml")
    assert "13.toml" in missing and "notebooks/ has 0 notebooks 13_*" in missing
    (misnamed,) = _check(root, _claim("speedup('reduce-overhead') > 1"), name="07_x.toml")
    assert "named NN.toml" in misnamed


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[[claim]]\nsentence = 'x'\ntable = ['a']\nhold = 'median(\"a\") > 0'\n", "unknown key(s) ['hold']"),
        ("[[claim]]\nsentence = 'x'\nholds = 'median(\"a\") > 0'\n", "exactly one of `table`"),
        ("[[claim]]\nsentence = 'x'\ntable = ['a']\noutput = 'y'\nholds = 'median(\"a\") > 0'\n", "exactly one"),
        ("[[claim]]\ntable = ['a']\nholds = 'median(\"a\") > 0'\n", "`sentence` is required"),
        ("[[claim]]\nsentence = 'x'\ntable = 'a'\nholds = 'median(\"a\") > 0'\n", "list of the table's row labels"),
        ("[[claim]]\nsentence = 'x'\noutput = '(?P<r>[0-9]+)'\nholds = 'value(\"s\") > 0'\n", "no named group"),
        ("[[claim]]\nsentence = 'x'\noutput = '(unclosed'\nholds = 'value(\"s\") > 0'\n", "not a regular expression"),
        ("[[claim]\nsentence = 'x'\n", "not TOML"),
        ("[other]\nx = 1\n", "only [[claim]] tables"),
    ],
)
def test_a_malformed_claims_file_fails_with_what_to_change(tmp_path, toml, message):
    (problem,) = _check(_repo(tmp_path), toml)
    assert message in problem and "07.toml" in problem


@pytest.mark.parametrize(
    "holds",
    [
        "__import__('os').system('touch {canary}') == 0",
        "open('{canary}', 'w') is None",
        "eval('1') == 1",
        "median('eager').real > 0",
        "(1).__class__ == 1",
        "[x for x in ()] == []",
        "(lambda: 1)() == 1",
        "median('eager') ** 2 > 0",
        "median('eager') // 2 > 0",
        "median('eager') if 1 else 0 > 0",
        "median(eager) > 0",
        "median('eager', 'default') > 0",
        "median(label='eager') > 0",
        "median('ea' + 'ger') > 0",
        "value('r') > 0",
        "'a' < 'b'",
        "True == True",
        "median('eager')",
        "median('eager') > 0; import os",
        "max(*[1, 2]) > 0",
        "globals() != 0",
    ],
)
def test_an_expression_outside_the_whitelist_is_refused_and_never_run(tmp_path, holds):
    canary = tmp_path / "canary"
    root = _repo(tmp_path)
    (problem,) = _check(root, _claim(holds.format(canary=canary), table='["eager"]'))
    assert problem.startswith("07.toml, claim 1: ")
    assert not canary.exists()
    with pytest.raises(claims.ClaimError):
        claims.check_expression(holds.format(canary=canary), claims.TABLE_READERS)


def test_the_whitelist_allows_what_the_format_promises(tmp_path):
    root = _repo(tmp_path)
    holds = (
        "not (median('default') < median('eager')) and -1 < spread('eager') <= 0.1 "
        "or abs(speedup('default') - 1) > max(0.1, min(0.2, 0.3)) / 2 + 1 * 0"
    )
    assert _check(root, _claim(holds)) == []


def test_a_division_by_zero_is_a_problem_not_a_crash(tmp_path):
    (problem,) = _check(_repo(tmp_path), _claim("median('eager') / 0 > 1"))
    assert "division by zero" in problem


def test_several_tables_with_the_labels_need_a_title_and_the_title_picks_one(tmp_path):
    one = "1 row(s) per call:\n" + _table({"bfloat16": 144e-6, "int8": 874e-6})
    many = "4096 row(s) per call:\n" + _table({"bfloat16": 2.98e-3, "int8": 4.19e-3})
    root = _repo(tmp_path, {"gpu-a": [one + "\n" + many]})
    (ambiguous,) = _check(root, _claim("speedup('int8') > 0.5", table='["bfloat16", "int8"]'))
    assert "2 tables have rows" in ambiguous and "add `title`" in ambiguous
    picked = _claim("speedup('int8') > 0.5", table='["bfloat16", "int8"]', extra="title = '^4096 row'")
    assert _check(root, picked) == []
    (contradicted,) = _check(root, picked.replace("^4096 row", "^1 row"))
    assert contradicted.startswith("CONTRADICTED") and "speedup('int8') = 0.165x" in contradicted


def test_an_output_claim_reads_numbers_from_the_printed_text(tmp_path):
    root = _repo(tmp_path, {"gpu-a": ["cudnn.benchmark: 1.00x\npinned copy: 55,300 MB/s\n"]})
    toml = (
        f"[[claim]]\nsentence = {json.dumps(SENTENCE)}\n"
        "output = 'pinned copy: (?P<rate>[0-9,.]+) MB/s'\nholds = \"value('rate') > 50000\"\n"
    )
    assert _check(root, toml) == []
    (problem,) = _check(root, toml.replace("> 50000", "> 60000"))
    assert problem.startswith("CONTRADICTED") and "value('rate') = 55300" in problem


def test_a_kept_run_without_its_conditions_is_refused(tmp_path):
    root = _repo(tmp_path)
    folder = root / "notebooks" / "gpu-runs" / "gpu-a"
    (folder / "run.json").write_text(json.dumps({k: v for k, v in _run_json().items() if k != "driver"}))
    with pytest.raises(gpu_runs.KeptRunError, match="missing 'driver'"):
        gpu_runs.read_run(folder)
    (folder / "run.json").write_text(json.dumps(_run_json(notebooks=["07_x.ipynb", "09_y.ipynb"])))
    with pytest.raises(gpu_runs.KeptRunError, match="the folder holds"):
        gpu_runs.read_run(folder)
    (folder / "run.json").write_text(json.dumps(_run_json(date="26 Nov 2026")))
    with pytest.raises(gpu_runs.KeptRunError, match="YYYY-MM-DD"):
        gpu_runs.read_run(folder)


# --- the checker, on the real H200 run ------------------------------------------------------------------


def _h200_repo(tmp_path: Path, number: str) -> Path:
    """A repository whose notebook NN is the kept run's own (d393fde's text), and whose runs are the kept ones."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "tests" / "gpu_claims").mkdir(parents=True)
    (kept,) = H200.glob(f"{number}_*.ipynb")
    shutil.copy(kept, root / "notebooks" / kept.name)
    (root / "notebooks" / "gpu-runs").symlink_to(gpu_runs.RUNS_DIR)
    return root


# Notebook 11, cell 33, at commit d393fde (the kept run's own text).
COMPILED_CLOSE_TO_FUSED = (
    "On a GPU, expect foreach and fused well ahead of the for-loop, the more so the more parameter tensors a "
    "model has, and the compiled step close to fused."
)


def test_the_h200_run_contradicts_notebook_11_on_the_compiled_optimizer_step(tmp_path):
    """Issue 22: compiled Adam took 339 µs on the H200 against fused's 164 µs, where the text said "close to fused"."""
    root = _h200_repo(tmp_path, "11")
    claim = _claim(
        "speedup('foreach') > 2 and speedup('fused') > 2 and median('compiled') < 1.25 * median('fused')",
        table='["for-loop", "foreach", "fused", "compiled"]',
        sentence=COMPILED_CLOSE_TO_FUSED,
        extra='runs = "h200-*"',
    )
    (problem,) = _check(root, claim, "11.toml")
    print(problem)  # the report quotes it
    first, run, holds = problem.splitlines()
    assert first == f"CONTRADICTED: 11.toml, claim 1: {COMPILED_CLOSE_TO_FUSED!r}"
    assert run.startswith("  run h200-torch2.11-d393fde (NVIDIA H200, torch 2.11.0+cu130, 2026-11-26, commit d393fde)")
    assert "notebook 11, cell 32, table of for-loop, foreach, fused, compiled" in run
    assert holds.endswith("median('compiled') = 339 µs, median('fused') = 164 µs")
    # The first half of the sentence holds on the same run: the checker is not failing everything.
    holds_part = claim.replace(" and median('compiled') < 1.25 * median('fused')", "")
    assert _check(root, holds_part, "11.toml") == []


def test_the_h200_run_contradicts_notebook_07s_two_to_three_times(tmp_path):
    """Issue 22: "the published expectation for mixed precision is 2-3x"; the H200 printed 11.0x over IEEE float32."""
    root = _h200_repo(tmp_path, "07")
    claim = _claim(
        "2 <= speedup('autocast bfloat16') <= 3",
        table='["float32", "float32, TF32 matmuls", "autocast bfloat16"]',  # cell 22's CPU table has two of these
        sentence="On a GPU with Tensor Cores the published expectation for mixed precision is 2-3x on large models",
        extra='runs = "h200-*"',
    )
    (problem,) = _check(root, claim, "07.toml")
    print(problem)
    assert problem.startswith("CONTRADICTED") and "speedup('autocast bfloat16') = 11x" in problem


# --- the code behind a run's numbers -------------------------------------------------------------------


def test_a_claim_whose_cell_changed_since_the_run_is_stale_naming_the_cell(tmp_path):
    root = _repo(tmp_path)
    claim = _claim("1.8 < speedup('reduce-overhead') < 2.4")
    assert _check(root, claim) == []
    path = root / "notebooks" / "07_x.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = "run(batch=16)"  # the cell that printed the table, edited after the run
    nbformat.write(nb, path)
    (problem,) = _check(root, claim)
    assert problem.startswith(f"STALE: 07.toml, claim 1: {SENTENCE!r}")
    assert "printed it from cell 1; the code of cell 1 has changed since (the run is of commit abc1234)" in problem


def test_a_sentence_that_quotes_an_earlier_version_of_its_cell_must_name_the_runs_commit(tmp_path):
    root = _repo(tmp_path)
    path = root / "notebooks" / "07_x.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = "run(batch=16)"
    dated = "On the kept GPU run (commit abc1234, before this cell took batch 16), reduce-overhead ran about twice"
    nb.cells[0].source += f"\n\n{dated} as fast."
    nbformat.write(nb, path)
    earlier = "earlier_code = true"
    assert _check(root, _claim("speedup('reduce-overhead') > 1.8", sentence=dated, extra=earlier)) == []
    (undated,) = _check(root, _claim("speedup('reduce-overhead') > 1.8", extra=earlier))
    assert undated.startswith("STALE") and "does not name the run's commit (abc1234)" in undated
    nb.cells[1].source = "run()"  # the cell as the run had it: nothing earlier about it
    nbformat.write(nb, path)
    (needless,) = _check(root, _claim("speedup('reduce-overhead') > 1.8", sentence=dated, extra=earlier))
    assert needless.startswith("FAILED") and "drop `earlier_code`" in needless


def test_editing_a_real_cell_that_a_kept_claim_reads_makes_it_stale(tmp_path):
    """Notebook 01 as the H200 run had it: its float32 sweep claim holds until the sweep's cell is edited."""
    root = _h200_repo(tmp_path, "01")
    sweep = next(c for c in claims.load_claims(claims.CLAIMS_DIR / "01.toml") if "75-76%" in c.sentence)
    toml = "[[claim]]\n" + "\n".join(
        f"{key} = {json.dumps(value)}"
        for key, value in (("sentence", "large matmuls reached"), ("runs", sweep.runs), ("output", sweep.output),
                           ("holds", sweep.holds))
    )  # fmt: skip
    notebook = next((root / "notebooks").glob("01_*.ipynb"))
    nb = nbformat.read(notebook, as_version=4)
    nb.cells[1].source += "\n\nlarge matmuls reached"  # the sentence, so that only the code can make it fail
    nbformat.write(nb, notebook)
    assert _check(root, toml, "01.toml") == []
    (index,) = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "achieved = []" in c.source]
    nb.cells[index].source = nb.cells[index].source.replace("\n", "\n# edited after the run\n", 1)
    nbformat.write(nb, notebook)
    (problem,) = _check(root, toml, "01.toml")
    assert problem.startswith("STALE") and f"the code of cell {index} has changed since" in problem
