"""Build the course site (`make site`): Sphinx + MyST-NB over the notebooks, offline, into ``build/site/html``.

Contract: ``prepare(out)`` writes the Sphinx source tree ``out/src`` from the repository,
discovering what is there (never a fixed list):

* ``index.md``: ``docs/index.md`` with the course map, a table of every
  ``notebooks/NN_*.ipynb`` (title, the summary under it, its Colab link), and the tables of contents;
* ``NN_slug.ipynb``: each notebook as the site shows it (``site_notebook``): hidden tests
  removed (nbgrader's ``ClearHiddenTests``), solutions folded behind "Show the solution",
  the Colab badge (an image fetched from Google) replaced by a plain link to the student
  version, built from ``[project.urls] Repository`` (``repo_url``);
* ``instructor-guide.md``: ``grading/README.md``;
* ``gpu-runs.md``: the kept GPU runs (``notebooks/gpu-runs/``), their conditions and READMEs; each
  notebook page that a kept run holds gets a note, and its cells' kept outputs go to
  ``out/kept-runs/NN_slug.json`` (figures to ``_static/kept-runs/``), which the ``kept_runs``
  extension (``docs/kept_runs.py``) places beside the build's own outputs;
* ``conf.py``, ``_static/`` from ``docs/``, and MathJax from the ``jupyter-server-mathjax`` wheel.

Relative links in the notebooks and the guide that do not point at a page of the site
become links to the file on GitHub. A file is only rewritten when its text changes, so
Sphinx re-reads only what changed, and MyST-NB's cache (``out/jupyter_cache``) re-runs only
notebooks whose code changed. Then ``build(out)`` runs Sphinx with warnings as errors; a
notebook cell that raises fails the build.

Usage: ``python docs/build_site.py [--out build/site] [--jobs 2]`` (``make site``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import shutil
import string
import sys
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course_utils.env import quick_mode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the maintainers' scripts, as tools.X
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the site's own Sphinx extension (kept_runs)
from kept_runs import RUNS_PAGE, prepare_page, run_label, run_target

from tools.gpu_runs import KeptRun, kept_runs
from tools.repo_url import colab_url, repository_url

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDE = "instructor-guide"
COLAB_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
MARKDOWN_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
SOLUTION_PROMPTS = {"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}


def notebooks(root: Path = ROOT) -> list[Path]:
    """The course's notebooks, in order: ``notebooks/NN_*.ipynb``."""
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def title_and_summary(nb: NotebookNode) -> tuple[str, str]:
    """The first ``# `` heading (without its ``NN · `` number) and the first paragraph after it that is text.

    >>> cell = nbformat.v4.new_markdown_cell("# 03 · Feed it\\n\\n[![Open In Colab](b.svg)](u)\\n\\nFast.")
    >>> title_and_summary(nbformat.v4.new_notebook(cells=[cell]))
    ('Feed it', 'Fast.')
    """
    text = next((c.source for c in nb.cells if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")), "")
    blocks = [block.strip() for block in text.split("\n\n") if block.strip()]
    if not blocks:
        return "", ""
    title = re.sub(r"^#\s+(\d+\s*·\s*)?", "", blocks[0].splitlines()[0]).strip()
    summary = next((b for b in blocks[1:] if not COLAB_BADGE.fullmatch(b) and not b.startswith("#")), "")
    return title, " ".join(summary.split())


def rewrite_links(text: str, source: str, pages: dict[str, str], root: Path = ROOT) -> str:
    """Point relative Markdown links of the file ``source`` (repository path) at the site or at GitHub.

    ``pages`` maps repository paths to the site's documents (``notebooks/01_x.ipynb`` ->
    ``01_x.ipynb``); any other relative target becomes its GitHub URL.

    >>> text = "[b](../notebooks/01_x.ipynb#fit) [c](cli.py) [d](#top) [e](https://x.org)"
    >>> rewrite_links(text, "grading/README.md", {"notebooks/01_x.ipynb": "01_x.ipynb"}).replace(repository_url(), "R")
    '[b](01_x.ipynb#fit) [c](R/blob/main/grading/cli.py) [d](#top) [e](https://x.org)'
    """

    def one(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"^([a-z][a-z0-9+.-]*:|#)", target, re.I):  # a URL, mailto:, or an anchor on the page
            return match.group(0)
        path, _, fragment = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(source), path)).replace(os.sep, "/")
        anchor = f"#{fragment}" if fragment else ""
        if resolved in pages:
            return f"{match.group(1)}{pages[resolved]}{anchor}{match.group(3)}"
        return f"{match.group(1)}{repository_url(root)}/blob/main/{resolved}{anchor}{match.group(3)}"

    return MARKDOWN_LINK.sub(one, text)


def site_notebook(nb: NotebookNode, stem: str, pages: dict[str, str], root: Path = ROOT) -> NotebookNode:
    """The notebook as its page shows it: no hidden tests, solutions folded, a Colab link, links fixed."""
    from nbgrader.preprocessors import ClearHiddenTests

    page, _ = ClearHiddenTests().preprocess(copy.deepcopy(nb), {})
    link = f"[Open in Colab]({colab_url(stem, root)}) (the exercises, without their solutions)"
    linked = False
    for cell in page.cells:
        if cell.cell_type == "markdown":
            cell.source = rewrite_links(cell.source, f"notebooks/{stem}.ipynb", pages, root)
            if not linked and COLAB_BADGE.search(cell.source):
                cell.source, linked = COLAB_BADGE.sub(lambda _: link, cell.source, count=1), True
        elif cell.metadata.get("nbgrader", {}).get("solution"):
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "hide-input"]
            cell.metadata["mystnb"] = {**cell.metadata.get("mystnb", {}), **SOLUTION_PROMPTS}
    if not linked:  # no badge: the link goes under the title
        title = next((c for c in page.cells if c.cell_type == "markdown"), None)
        if title is None:
            page.cells.insert(0, nbformat.v4.new_markdown_cell(link))
        else:
            head, _, rest = title.source.partition("\n")
            title.source = f"{head}\n\n{link}\n{rest}"
    return page


def _table_cell(text: str) -> str:
    return text.replace("|", "\\|")


def course_map(paths: list[Path], root: Path = ROOT, runs: list[KeptRun] | None = None) -> str:
    """The course map (a table: number, title linking the page, summary, Colab), the kept GPU runs, the contents."""
    rows = ["| # | notebook | what you learn | Colab |", "|---|---|---|---|"]
    for path in paths:
        title, summary = title_and_summary(nbformat.read(path, as_version=4))
        rows.append(
            f"| {path.stem[:2]} | [{_table_cell(title or path.stem)}]({path.name}) | {_table_cell(summary)} "
            f"| [open]({colab_url(path.stem, root)}) |"
        )
    pages = "\n".join(path.stem for path in paths)
    kept = ""
    if runs:
        listed = "; ".join(
            f"{{ref}}`{run_label(run)} <{run_target(run)}>` (notebooks {', '.join(sorted(run.notebook_paths))})"
            for run in runs
        )
        kept = (
            f"What a GPU printed, kept with the course: {listed}. Those notebooks' pages show its "
            f"outputs beside this site's own, cell by cell ([all kept runs]({RUNS_PAGE}.md)).\n\n"
        )
    return (
        "## Course map\n\n"
        + "\n".join(rows)
        + "\n\n"
        + kept
        + f"For instructors: [grading a class]({GUIDE}.md) with the course's nbgrader tools.\n\n"
        f"```{{toctree}}\n:hidden:\n:caption: Notebooks\n\n{pages}\n```\n\n"
        + (f"```{{toctree}}\n:hidden:\n:caption: Kept GPU runs\n\n{RUNS_PAGE}\n```\n\n" if runs else "")
        + f"```{{toctree}}\n:hidden:\n:caption: Instructors\n\n{GUIDE}\n```\n"
    )


def runs_page(runs: list[KeptRun], pages: dict[str, str], root: Path = ROOT) -> str:
    """The kept GPU runs: one section per run with its conditions, its notebooks and its README."""
    parts = [
        "# Kept GPU runs\n",
        "What the course's notebooks printed on a GPU, kept in the repository (`notebooks/gpu-runs/`) so that "
        "a learner without one reads what a datacenter GPU prints, and so that the course's sentences about GPUs "
        "are checked against it (`tests/notebooks/test_gpu_claims.py`). Each notebook page shows a run's outputs "
        "beside the site's own build. A run printed the code of its commit: where a cell changed since, its page "
        "says so. `python tools/gpu_check.py --keep` on a GPU machine adds a run (CONTRIBUTING.md).\n",
    ]
    for run in runs:
        info = run.info
        notebooks = ", ".join(f"[{path.stem[:2]}]({path.name})" for path in run.notebook_paths.values())
        others = ", ".join(info["other_gpu_processes"]) or "none seen"
        alone = "one notebook at a time" if info["one_notebook_at_a_time"] else "SEVERAL NOTEBOOKS AT ONCE"
        folder = f"notebooks/gpu-runs/{run.name}"
        readme = (run.folder / "README.md").read_text(encoding="utf-8")
        readme = re.sub(r"^(#+) ", lambda m: "#" * min(len(m.group(1)) + 2, 6) + " ", readme, flags=re.M)
        parts += [
            f"({run_target(run)})=\n## {run_label(run)}\n",
            "| | |\n|---|---|",
            f"| GPU | {info['gpu']}, {info['gpu_memory_mib']:,} MiB, compute capability {info['compute_capability']}, "
            f"driver {info['driver']} |",
            f"| host | {info['cpu']} |",
            f"| software | Python {info['python']}, torch {info['torch']} (CUDA {info['cuda']}), "
            f"torchao {info['torchao']} |",
            f"| code | commit `{info['commit']}`, run on {info['date']} |",
            f"| conditions | {alone}; other processes on the GPU: {others}; "
            f"{'small' if info['quick'] else 'full'} problem sizes |",
            f"| notebooks | {notebooks} |",
            f"| files | [{folder}/]({repository_url(root)}/tree/main/{folder}) |\n",
            "The run's README:\n",
            rewrite_links(readme, f"{folder}/README.md", pages, root),
        ]
    return "\n".join(parts) + "\n"


def this_machine() -> str:
    """The machine the site's notebooks run on, for the first column of each side-by-side output."""
    import torch

    from course_utils.device import device_name

    sizes = "small sizes (COURSE_QUICK=1)" if quick_mode() else "full sizes"
    return f"{device_name('cpu')} · torch {torch.__version__} · {sizes}"


def _write(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it (Sphinx re-reads files by modification time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _copy_mathjax(static: Path) -> None:
    import jupyter_server_mathjax

    source = Path(jupyter_server_mathjax.__file__).parent / "static"
    target = static / "mathjax"
    copied = target / "MathJax.js"
    if not copied.exists() or copied.read_bytes() != (source / "MathJax.js").read_bytes():
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)


def prepare(out: Path, root: Path = ROOT) -> Path:
    """Write the Sphinx source tree ``out/src``; return it."""
    src = out / "src"
    paths = notebooks(root)
    if not paths:
        raise SystemExit(f"site: no notebooks/NN_*.ipynb in {root}")
    pages = {f"notebooks/{p.name}": p.name for p in paths}
    pages |= {"grading/README.md": f"{GUIDE}.md", "README.md": "index.md"}
    runs = kept_runs(root / "notebooks" / "gpu-runs")
    static, data_dir = src / "_static" / "kept-runs", out / "kept-runs"
    machine = this_machine() if runs else ""
    images: set[str] = set()
    data_dir.mkdir(parents=True, exist_ok=True)
    for path in paths:
        source = nbformat.read(path, as_version=4)
        page, kept = prepare_page(site_notebook(source, path.stem, pages, root), source, path.stem, runs, static)
        _write(src / path.name, nbformat.writes(page) + "\n")
        images |= set(kept.pop("images", []))
        _write(data_dir / f"{path.stem}.json", json.dumps({**kept, "this_machine": machine}, indent=1) + "\n")
    for stale in set(src.glob("*.ipynb")) - {src / p.name for p in paths}:
        stale.unlink()
    for stale in set(data_dir.glob("*.json")) - {data_dir / f"{p.stem}.json" for p in paths}:
        stale.unlink()
    for stale in {p for p in static.rglob("*") if p.is_file()} - {Path(p) for p in images}:
        stale.unlink()
    if runs:
        _write(src / f"{RUNS_PAGE}.md", runs_page(runs, pages, root))
    elif (src / f"{RUNS_PAGE}.md").exists():
        (src / f"{RUNS_PAGE}.md").unlink()
    guide = (root / "grading" / "README.md").read_text(encoding="utf-8")
    _write(src / f"{GUIDE}.md", rewrite_links(guide, "grading/README.md", pages, root))
    run_note = "on a CPU, at the small problem sizes of the test suite (`COURSE_QUICK=1`)"
    if not quick_mode():
        run_note = "on a CPU, at full problem sizes"
    index = string.Template((DOCS / "index.md").read_text(encoding="utf-8")).substitute(
        run_note=run_note, repository=repository_url(root), course_map=course_map(paths, root, runs)
    )
    _write(src / "index.md", index)
    _write(src / "conf.py", (DOCS / "conf.py").read_text(encoding="utf-8"))
    for asset in (DOCS / "_static").iterdir():
        _write(src / "_static" / asset.name, asset.read_text(encoding="utf-8"))
    _copy_mathjax(src / "_static")
    return src


def _forget_stale_runs(out: Path, root: Path = ROOT) -> None:
    """Drop the cached notebook runs when what they ran with changed (``course_utils``, the lock, quick mode).

    MyST-NB's cache only sees a notebook's own code; Sphinx's pickled pages go with it.
    """
    digest = hashlib.sha256(f"quick={quick_mode()}".encode())
    for path in [*sorted((root / "course_utils").rglob("*.py")), root / "requirements.lock"]:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    stamp = out / "jupyter_cache.fingerprint"
    if not stamp.exists() or stamp.read_text() != digest.hexdigest():
        shutil.rmtree(out / "jupyter_cache", ignore_errors=True)
        shutil.rmtree(out / "html" / ".doctrees", ignore_errors=True)
        out.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest.hexdigest())


def retry_failed_runs(out: Path, src: Path) -> list[str]:
    """Make Sphinx read (and MyST-NB run) again each notebook whose run failed last time; return their names.

    A failed run is not cached and leaves a report in ``html/reports/``; but Sphinx re-reads a
    page only when its source changed, so without this the next build would keep the failed
    page and succeed.
    """
    retried = []
    for report in sorted((out / "html" / "reports").glob("*.err.log")):
        page = src / f"{report.name.removesuffix('.err.log')}.ipynb"
        if page.exists():
            page.touch()
            retried.append(page.name)
        report.unlink()
    return retried


def build(out: Path, jobs: int) -> int:
    """Prepare the sources and run Sphinx (warnings are errors); Sphinx's exit status."""
    from jupyter_cache import get_cache
    from sphinx.cmd.build import build_main

    src = prepare(out)
    _forget_stale_runs(out)
    retry_failed_runs(out, src)
    (out / "jupyter_cache").mkdir(parents=True, exist_ok=True)
    _ = get_cache(str(out / "jupyter_cache")).db  # create the database here, not in Sphinx's parallel readers
    return build_main(["-b", "html", "-W", "--keep-going", "-j", str(jobs), str(src), str(out / "html")])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/build_site.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site", help="build folder (default build/site)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once (Sphinx -j; default 2)")
    args = parser.parse_args(argv)
    status = build(args.out, args.jobs)
    if status == 0:
        print(f"site: open {args.out / 'html' / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
