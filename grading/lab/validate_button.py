"""The learner lab's Validate button, answered by ``course validate`` instead of ``nbgrader validate``.

Contract: a Jupyter server extension (enabled only in the learner's lab, by
``jupyter/learner/jupyter_server_config.d/course-learner.json``) that serves the two URLs
nbgrader 0.9.6's Validate button calls (lab plugin ``@jupyter/nbgrader:validate-assignment``,
``src/validate_assignment/index.ts``): ``GET /nbgrader_version`` (nbgrader's own handler) and
``POST /assignments/validate?path=NOTEBOOK``. The button saves the notebook first; this
handler then runs ``grading.validate.validate`` on the saved file, exactly what
``course validate NOTEBOOK`` runs, and answers in the JSON nbgrader's dialog reads
(``src/common/validate.ts``): ``{}`` when every visible test passes, a ``failed`` list (one
entry per failing test, the score and notes under the last) otherwise, and
``success: false`` with the command's text when nothing could be graded.

Why not nbgrader's own backend: plain ``nbgrader validate`` fails any test cell that wrote to
stderr, so notebook 10's profiler tests (PyTorch's profiler prints ``USDT:`` lines there)
score 0 with it while ``course validate`` and ``course autograde`` give full marks.
"""

from __future__ import annotations

import asyncio
import html
import json
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

__all__ = ["nbgrader_answer", "validate_notebook"]


def validate_notebook(path: Path):  # -> grading.validate.Validation
    """What ``course validate PATH`` computes (the repository's course, default limits)."""
    from grading.coursedir import default_course
    from grading.sandbox.protections import Limits, detect
    from grading.validate import validate

    return validate(path, default_course(), Limits(), detect())


def nbgrader_answer(result) -> dict[str, Any]:
    """A ``Validation`` in the JSON nbgrader's Validate dialog shows.

    As ``nbgrader validate`` does, a failing test and an unanswered written answer are
    ``failed`` entries; a locked cell the learner changed is one too (nbgrader's dialog
    would show only the changed cells and hide the failures; grading uses the original).
    """
    text = result.text()
    if not result.cells:
        return {"success": False, "value": text}
    failed = [
        {"source": f"{name} (locked cell)", "error": "you changed this cell; grading uses the original"}
        for name in result.changed
    ]
    failed += [
        {
            "source": f"{cell.grade_id} ({cell.points:g} pt)",
            "error": html.escape(
                (cell.message or "failed") if cell.status == "fail" else "you did not provide a response (scores 0)"
            ),
        }
        for cell in result.cells
        if cell.status in ("fail", "unanswered")
    ]
    if not failed:
        return {"success": True, "value": {}}
    summary = [line for line in text.splitlines() if line.startswith("note: ")] + text.splitlines()[-1:]
    failed[-1]["error"] += "\n\n" + html.escape("\n".join(summary))
    return {"success": True, "value": {"failed": failed}}


class ValidateHandler(JupyterHandler):
    """``POST /assignments/validate?path=...``: run ``course validate`` on a notebook under the root."""

    def initialize(self, root_dir: str) -> None:
        self.root_dir = Path(root_dir).resolve()

    @web.authenticated
    async def post(self) -> None:
        relative = self.get_argument("path", None) or (self.get_json_body() or {}).get("path")
        if not relative:
            raise web.HTTPError(400, "missing the notebook path")
        target = (self.root_dir / relative).resolve()
        if not target.is_relative_to(self.root_dir):
            raise web.HTTPError(403, "path outside the served folder")
        if not target.is_file():
            raise web.HTTPError(404, f"no notebook at {relative}")
        try:
            answer = nbgrader_answer(await asyncio.to_thread(validate_notebook, target))
        except Exception as error:  # the dialog shows it; the server log keeps the traceback
            self.log.exception("course validate failed on %s", target)
            answer = {"success": False, "value": f"course validate failed: {error}"}
        self.finish(json.dumps(answer))


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    from nbgrader.server_extensions.validate_assignment.handlers import NbGraderVersionHandler

    base = serverapp.web_app.settings["base_url"]
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "assignments/validate"), ValidateHandler, {"root_dir": serverapp.root_dir}),
            (url_path_join(base, "nbgrader_version"), NbGraderVersionHandler),
        ],
    )
    serverapp.log.info("grading.lab.validate_button: the Validate button runs `course validate`")
