"""The course's Git repository URL: stated once in ``pyproject.toml``, copied into every link to it.

Contract: ``repository_url()`` reads ``[project.urls] Repository`` from ``pyproject.toml``
(a GitHub URL, ``https://github.com/OWNER/NAME``: Colab opens notebooks from GitHub only).
The URL also has to appear, spelled out, where nothing can read ``pyproject.toml``: each
notebook's Colab install line (``git+https://github.com/OWNER/NAME``) and Colab badge
(``https://colab.research.google.com/github/OWNER/NAME/blob/main/...``), the student
versions generated from them, and the README's course map. ``mentions(text)`` finds every
``OWNER/NAME`` so written (the test suite checks they all agree); ``set_repository_url(url)``
rewrites all of them and ``pyproject.toml``, for a fork::

    make set-repo-url URL=https://github.com/me/my-fork     # python tools/repo_url.py URL

``colab_url(stem)`` is the Colab link to a notebook's student version, the one place that
spells out where the student versions live in the repository (``RELEASE``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

__all__ = [
    "RELEASE",
    "RepoUrlError",
    "colab_url",
    "main",
    "mentions",
    "repository_url",
    "set_repository_url",
    "slug",
    "url_files",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
RELEASE = "grading/course/release"
"""Where the student versions live, relative to the repository root (``course release`` writes them)."""
_GITHUB = re.compile(r"^https://github\.com/([A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+?)(?:\.git)?/?$")
_PYPROJECT_URL = re.compile(r'^(\[project\.urls\][^\[]*?^Repository\s*=\s*")([^"]+)(")', re.M | re.S)
_MENTION = re.compile(
    r"(git\+https://github\.com/|colab\.research\.google\.com/github/)"
    r"([A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+?)(?=\.git|[^A-Za-z0-9._-]|$)"
)


class RepoUrlError(Exception):
    """A URL this course cannot use, or a pyproject.toml without one."""


def slug(url: str) -> str:
    """``OWNER/NAME`` of a GitHub URL.

    >>> slug("https://github.com/pytorch-perf-course/optimization-course")
    'pytorch-perf-course/optimization-course'
    """
    match = _GITHUB.match(url.strip())
    if not match:
        raise RepoUrlError(f"{url!r} is not a GitHub repository URL (https://github.com/OWNER/NAME); Colab needs one")
    return match.group(1)


def repository_url(root: Path = REPO_ROOT) -> str:
    """``[project.urls] Repository`` of ``root/pyproject.toml``."""
    match = _PYPROJECT_URL.search((root / "pyproject.toml").read_text(encoding="utf-8"))
    if not match:
        raise RepoUrlError(f"{root / 'pyproject.toml'} has no [project.urls] Repository entry")
    return match.group(2)


def colab_url(stem: str, root: Path = REPO_ROOT) -> str:
    """Colab's link to the student version of notebook ``stem`` (``RELEASE/STEM/STEM.ipynb`` on ``main``).

    >>> colab_url("01_x", REPO_ROOT).endswith("/blob/main/grading/course/release/01_x/01_x.ipynb")
    True
    """
    return (
        f"https://colab.research.google.com/github/{slug(repository_url(root))}/blob/main/{RELEASE}/{stem}/{stem}.ipynb"
    )


def url_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files that spell the URL out: README, CONTRIBUTING, notebooks and their student versions."""
    files = [root / "README.md", root / "CONTRIBUTING.md"]
    files += sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / RELEASE).glob("*/*.ipynb"))
    return [f for f in files if f.is_file()]


def mentions(text: str) -> list[str]:
    """Every ``OWNER/NAME`` in a Git install URL or a Colab GitHub link of ``text``.

    >>> mentions('[open](https://colab.research.google.com/github/a/b/blob/main/x.ipynb) "c @ git+https://github.com/a/b"')
    ['a/b', 'a/b']
    """
    return [m.group(2) for m in _MENTION.finditer(text)]


def set_repository_url(url: str, root: Path = REPO_ROOT) -> list[Path]:
    """Point every link (and ``pyproject.toml``) at ``url``; returns the files changed."""
    new = slug(url)
    canonical = f"https://github.com/{new}"
    changed = []
    for path in url_files(root):
        text = path.read_text(encoding="utf-8")
        rewritten = _MENTION.sub(lambda m: m.group(1) + new, text)
        if rewritten != text:
            path.write_text(rewritten, encoding="utf-8")
            changed.append(path)
    pyproject = root / "pyproject.toml"
    repository_url(root)  # fails clearly when the entry is missing
    text = pyproject.read_text(encoding="utf-8")
    rewritten = _PYPROJECT_URL.sub(lambda m: m.group(1) + canonical + m.group(3), text)
    if rewritten != text:
        pyproject.write_text(rewritten, encoding="utf-8")
        changed.append(pyproject)
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python tools/repo_url.py [URL]``: set the URL, or (no URL) check every link agrees."""
    parser = argparse.ArgumentParser(prog="tools/repo_url.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", help="new https://github.com/OWNER/NAME (default: only check)")
    args = parser.parse_args(argv)
    try:
        if args.url:
            for path in set_repository_url(args.url):
                print(f"rewrote {path.relative_to(REPO_ROOT)}")
        expected = slug(repository_url())
    except (RepoUrlError, OSError) as error:
        print(f"repo-url: {error}", file=sys.stderr)
        return 2
    wrong = [
        f"{path.relative_to(REPO_ROOT)}: {found}"
        for path in url_files()
        for found in mentions(path.read_text(encoding="utf-8"))
        if found != expected
    ]
    print("\n".join(wrong) if wrong else f"every link points at https://github.com/{expected}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
