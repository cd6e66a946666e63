"""The kept GPU runs (``notebooks/gpu-runs/<run>/``) and the ``compare`` tables their notebooks printed.

A kept run is a folder of executed notebooks ``NN_slug.ipynb``, exactly as a GPU printed them
(``tools/gpu_check.py --keep`` writes one), with ``README.md`` (the conditions, for people) and
``run.json`` (the same, for programs: ``RUN_FIELDS``). ``kept_runs`` reads them;
``tables`` finds every table that ``course_utils.timing.Comparison.table`` printed in a
notebook's outputs, in the format of today (``2.10x faster``, ``1.24x slower``, ``noisy``) and
in the older one (``0.81x``), so that runs made before the format changed stay readable.
``tests/notebooks/test_gpu_claims.py`` checks the course's recorded GPU claims against them and
``docs/build_site.py`` shows them beside this machine's outputs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = ROOT / "notebooks" / "gpu-runs"

# run.json: key -> (type, what it records). Every key is required.
RUN_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "gpu": (str, "the GPU's name as torch.cuda.get_device_name prints it"),
    "gpu_memory_mib": (int, "the GPU's memory in MiB"),
    "compute_capability": (str, "e.g. 9.0"),
    "driver": (str, "the NVIDIA driver version"),
    "cpu": (str, "the host's processor and core count"),
    "python": (str, "Python version"),
    "torch": (str, "torch.__version__"),
    "cuda": (str, "torch.version.cuda"),
    "torchao": (str, "torchao's version, or 'none'"),
    "commit": (str, "the course commit the notebooks came from (short hash)"),
    "date": (str, "YYYY-MM-DD, the day of the run"),
    "quick": (bool, "true when run at the test suite's small sizes (COURSE_QUICK=1)"),
    "one_notebook_at_a_time": (bool, "true when no two notebooks shared the GPU"),
    "other_gpu_processes": (list, "what else used the GPU during the run (empty: nothing that could be seen)"),
    "notebooks": (list, "the notebooks of the run, file names"),
}

_SECONDS = r"[0-9.]+(?:e[+-]?[0-9]+)? (?:s|ms|µs|ns)"
_UNIT = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}
# A row: the variant's name (it may hold spaces), median, ± IQR/2, items/s (when printed), the ratio to the
# baseline and, in today's format, "noisy". The name is the shortest prefix after which the rest fits.
_ROW = re.compile(
    rf"^(?P<label>\S.*?)\s+(?P<median>{_SECONDS})\s+(?P<half_iqr>{_SECONDS})(?:\s+(?P<items>[0-9.e+]+))?"
    r"\s+(?P<ratio>baseline|[0-9.]+x(?: faster| slower)?)(?:\s+(?P<noisy>noisy))?\s*$"
)
_HEADER = re.compile(r"^variant\s+median\s+± IQR/2(\s+items/s)?\s+(speedup|vs baseline)\s*$")


class KeptRunError(Exception):
    """A kept run's folder is not in the kept-run layout; the message says what is wrong."""


def seconds(text: str) -> float:
    """Seconds from ``format_seconds``'s text.

    >>> seconds("2.93 µs"), seconds("1.2e+03 s")
    (2.93e-06, 1200.0)
    """
    number, unit = text.split()
    return float(number) * _UNIT[unit]


@dataclass(frozen=True)
class Row:
    """One variant of a printed table, in seconds per call as printed (three significant digits)."""

    label: str
    median: float
    half_iqr: float
    ratio: str  # as printed: "1.00x", "0.81x" (old), "baseline", "2.10x faster", "1.24x slower"
    noisy: bool  # marked noisy in the table (today's format only)

    @property
    def spread(self) -> float:
        """(IQR/2) / median: how widely the middle half of the timings spread around the median."""
        return self.half_iqr / self.median


@dataclass(frozen=True)
class Table:
    """A table printed by ``Comparison.table`` in one cell's text outputs."""

    cell: int  # the cell's index in the notebook
    title: str  # the lines printed between the previous table (or the cell's start) and this one
    hardware: str  # from the "on ..." line above the header ("" when none)
    rows: tuple[Row, ...]

    @property
    def labels(self) -> list[str]:
        return [row.label for row in self.rows]

    def row(self, label: str) -> Row:
        for row in self.rows:
            if row.label == label:
                return row
        raise KeyError(label)

    def describe(self) -> str:
        """``cell 28, table of eager, default, reduce-overhead (under 'batch 8:')`` for messages."""
        title = f" (under {self.title.splitlines()[-1].strip()!r})" if self.title.strip() else ""
        return f"cell {self.cell}, table of {', '.join(self.labels)}{title}"


def _parse_row(line: str) -> Row | None:
    match = _ROW.match(line)
    if match is None:
        return None
    return Row(
        match["label"], seconds(match["median"]), seconds(match["half_iqr"]), match["ratio"], bool(match["noisy"])
    )


def parse_tables(text: str, cell: int = 0) -> list[Table]:
    """Every ``Comparison.table`` in ``text`` (one cell's printed text).

    >>> text = '''1 row per call:
    ... on GPU X
    ... variant        median     ± IQR/2  speedup
    ... bfloat16       144 µs      305 ns    1.00x
    ... int8, eager    874 µs     1.56 µs    0.16x
    ... '''
    >>> [(t.title, t.hardware, t.labels, t.row("int8, eager").median) for t in parse_tables(text)]
    [('1 row per call:', 'GPU X', ['bfloat16', 'int8, eager'], 0.000874)]
    """
    lines = text.splitlines()
    tables: list[Table] = []
    since = 0  # the first line after the previous table
    index = 0
    while index < len(lines):
        header = lines[index]
        if not _HEADER.match(header):
            index += 1
            continue
        rows = []
        end = index + 1
        while end < len(lines) and (row := _parse_row(lines[end])) is not None:
            rows.append(row)
            end += 1
        above = lines[since:index]
        hardware = ""
        if above and above[-1].startswith("on "):
            hardware, above = above[-1][3:].strip(), above[:-1]
        if rows:
            tables.append(Table(cell, "\n".join(above).strip(), hardware, tuple(rows)))
        since = index = end
    return tables


def cell_text(cell: NotebookNode) -> str:
    """What a code cell printed as text: its stdout, then the text of its results and displays, in order."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stdout":
            parts.append(output.get("text", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            plain = output.get("data", {}).get("text/plain", "")
            parts.append(plain if plain.endswith("\n") else plain + "\n")
    return "".join(parts)


def notebook_text(nb: NotebookNode) -> str:
    """The text outputs of every code cell, joined with newlines (stderr and errors left out)."""
    return "\n".join(cell_text(cell) for cell in nb.cells if cell.cell_type == "code")


def tables(nb: NotebookNode) -> list[Table]:
    """Every ``compare`` table the notebook's cells printed, in order."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            found += parse_tables(cell_text(cell), index)
    return found


@dataclass
class KeptRun:
    """One kept run: its folder, ``run.json`` and executed notebooks."""

    folder: Path
    info: dict
    notebook_paths: dict[str, Path] = field(default_factory=dict)  # "07" -> folder/07_slug.ipynb
    _read: dict[str, NotebookNode] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.folder.name

    def describe(self) -> str:
        """``NVIDIA H200, torch 2.11.0+cu130, 2026-11-26, commit d393fde``."""
        info = self.info
        return f"{info['gpu']}, torch {info['torch']}, {info['date']}, commit {info['commit']}"

    def notebook(self, number: str) -> NotebookNode | None:
        """Notebook ``NN`` as the GPU printed it, or None when the run does not hold it."""
        if number not in self.notebook_paths:
            return None
        if number not in self._read:
            self._read[number] = nbformat.read(self.notebook_paths[number], as_version=4)
        return self._read[number]


def read_run(folder: Path) -> KeptRun:
    """The kept run in ``folder``; ``KeptRunError`` when its layout is wrong."""
    info_path = folder / "run.json"
    if not info_path.is_file():
        raise KeptRunError(f"{folder}: no run.json (see tests/gpu_claims/README.md for the kept-run layout)")
    if not (folder / "README.md").is_file():
        raise KeptRunError(f"{folder}: no README.md with the run's conditions")
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise KeptRunError(f"{info_path}: not JSON ({exc})") from exc
    problems = [f"missing {key!r} ({what})" for key, (_, what) in RUN_FIELDS.items() if key not in info]
    problems += [
        f"{key!r} should be {kind.__name__ if isinstance(kind, type) else kind}, not {info[key]!r}"
        for key, (kind, _) in RUN_FIELDS.items()
        if key in info and not isinstance(info[key], kind)
    ]
    if isinstance(info.get("date"), str) and not re.fullmatch(r"\d{4}-\d\d-\d\d", info["date"]):
        problems.append(f"'date' should be YYYY-MM-DD, not {info['date']!r}")
    paths = {p.name[:2]: p for p in sorted(folder.glob("[0-9][0-9]_*.ipynb"))}
    listed = sorted(info.get("notebooks", []))
    if isinstance(info.get("notebooks"), list) and listed != sorted(p.name for p in paths.values()):
        problems.append(f"'notebooks' lists {listed}, the folder holds {sorted(p.name for p in paths.values())}")
    if problems:
        raise KeptRunError(f"{info_path}: " + "; ".join(problems))
    return KeptRun(folder, info, paths)


def kept_runs(runs_dir: Path = RUNS_DIR) -> list[KeptRun]:
    """Every kept run in ``runs_dir``, by folder name."""
    if not runs_dir.is_dir():
        return []
    return [read_run(folder) for folder in sorted(runs_dir.iterdir()) if folder.is_dir()]
