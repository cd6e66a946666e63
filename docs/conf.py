"""Sphinx configuration of the course site; `make site` (``docs/build_site.py``) copies it into the source tree.

Sphinx with MyST-NB renders each notebook with its outputs; the notebooks run at build
time (``COURSE_QUICK`` as the environment says) through MyST-NB's jupyter-cache, so a later
build only re-runs a notebook whose code changed. Nothing is fetched over the network, at
build time or when a page is viewed: the theme's assets are in the wheel and MathJax comes
from the ``jupyter-server-mathjax`` wheel (``_static/mathjax``, copied by the build).
"""

import json
from pathlib import Path

from tools.repo_url import repository_url

SITE = Path(__file__).resolve().parents[1]  # build/site: src/ (this file), html/, jupyter_cache/

project = "Optimization techniques for PyTorch"
html_title = project
# kept_runs (docs/kept_runs.py, importable because build_site.py puts docs/ on sys.path): the kept GPU
# runs' outputs beside the build's own, from the files build_site.py writes to build/site/kept-runs/.
extensions = ["myst_nb", "kept_runs"]
exclude_patterns = ["_static"]
kept_runs_data = str(SITE / "kept-runs")
# The pages that show kept runs side by side give the right margin to those columns (course.css), not to
# the page's table of contents: two columns of a compare table do not fit in the text's width.
_side_by_side = sorted(
    path.stem
    for path in (SITE / "kept-runs").glob("*.json")
    if json.loads(path.read_text(encoding="utf-8")).get("cells")
)

# Notebooks: run in a fresh kernel at build time, cached; a cell that raises fails the build.
nb_execution_mode = "cache"
nb_execution_cache_path = str(SITE / "jupyter_cache")
nb_execution_timeout = 180  # seconds per cell, as the test suite allows (nbval)
nb_execution_in_temp = True  # files a notebook writes (profiler traces) stay out of the site
nb_execution_show_tb = True  # a failing cell is a warning with its traceback; -W makes it fail the build
nb_ipywidgets_js = {}  # no widget outputs; keeps the CDN scripts MyST-NB would add off every page
nb_merge_streams = True

# A code block that Pygments cannot lex exactly (a JSON excerpt with "...") is shown plain: not an error.
suppress_warnings = ["misc.highlighting_failure"]

myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
myst_update_mathjax = False  # its settings are for MathJax 3+; the local copy is MathJax 2

# MathJax 2.7 from the jupyter-server-mathjax wheel, served from _static (no CDN). The wheel ships
# the STIX-Web fonts only, so HTML-CSS output uses them (as the classic Jupyter Notebook did). Only
# Sphinx's own \( \) and \[ \] delimiters are typeset: dollar signs in code outputs stay as they are.
mathjax_path = "mathjax/MathJax.js"
mathjax2_config = {
    "config": ["TeX-AMS-MML_HTMLorMML-full.js"],
    "HTML-CSS": {"availableFonts": [], "webFont": "STIX-Web", "imageFont": None, "preferredFont": None},
    "tex2jax": {
        "inlineMath": [["\\(", "\\)"]],
        "displayMath": [["\\[", "\\]"]],
        "processRefs": False,
        "processEnvironments": False,
    },
}

html_theme = "sphinx_book_theme"
html_theme_options = {
    "repository_url": repository_url(),
    "use_repository_button": True,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "footer_content_items": [],  # no author line: the repository names its contributors
    "use_download_button": False,  # it links the page's source, which the site does not copy (html_copy_source)
    "secondary_sidebar_items": {"**": ["page-toc.html"], **{page: [] for page in _side_by_side}},
}
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_copy_source = False
html_show_sourcelink = False
html_show_sphinx = False
