"""Learner HTML in a graded notebook made inert before any person's browser renders it.

Contract: ``make_safe_to_read(nb)`` returns ``nb`` (changed in place) so that rendering it
with nbconvert's HTML templates (nbgrader's formgrader and feedback) or opening it in
JupyterLab runs nothing a learner wrote, while everything the learner wrote stays
readable. It treats every cell alike (an instructor's cell passes unchanged, since
nothing in it is active), so it needs to know nothing about which cells a learner could
change, and running it twice changes nothing more:

* a markdown cell whose rendered HTML (nbconvert's own markdown renderer, its
  attachments included) holds anything outside a fixed list of inert tags, attributes and
  URLs (``<script>``, ``onerror=``, ``<iframe>``, ``<svg>``, a ``javascript:`` link, an
  HTML comment), or whose text holds a ``javascript:`` URL in any spelling (MathJax's
  ``\\href`` is one), is shown as its source text, in a fenced code block, under a line
  saying why; a cell without such content is kept exactly as written. The allowlist holds
  what markdown and honest answers make: headings, tables (their ``text-align`` styles),
  task lists' disabled checkboxes, images (``http(s)``, relative or base64 PNG, JPEG, GIF,
  WebP), ``http``/``https``/``mailto``/relative links, ``<sup>``, ``<details>``, a
  ``style`` that only sets colours, alignment or font style;
* outputs keep only inert MIME types: ``text/plain``, base64 ``image/png``,
  ``image/jpeg`` and ``image/gif`` (plots still show), ``text/latex`` without a
  ``javascript:`` URL, ``application/json``, and ``text/html`` / ``text/markdown`` when
  inert. Active HTML is dropped where the output has its own text (a pandas table keeps
  its text form); where it has none, the HTML is kept escaped by bleach (``strip=False``),
  so it reads as text. Everything else (``application/javascript``, ``text/javascript``,
  ``image/svg+xml``, widget views, unknown types) is dropped, with a ``text/plain`` line
  saying so when nothing else is left;
* raw cells are left as written: nbconvert's templates always pass them through its
  ``clean_html``, and JupyterLab shows them as text;
* metadata the templates read (cell tags, ids, ``transient`` and ``jupyter`` flags that
  hide a cell's source, output ``width``/``height``/``isolated``, the notebook's
  ``title`` and ``widgets``) keeps only plain values: cells keep ``nbgrader``, the
  grader's own key and word-like ``tags``; outputs keep numeric sizes; the notebook keeps
  ``kernelspec`` and ``language_info``.

For notebooks this module never saw (made by plain nbgrader or an older version), the
same rules apply where nbconvert renders them: ``SafeToRead`` is ``make_safe_to_read`` as
an nbconvert preprocessor, and ``clean_html`` the same allowlist as an nbconvert filter;
``safe_exporter_config`` sets both on ``HTMLExporter`` with ``sanitize_html`` (nbconvert's
own ``clean_html`` would escape ``<p>`` and ``<h1>``, so every markdown cell would read as
tags; its ``sanitize_html`` alone also leaves an image output's ``width`` metadata
unescaped in an attribute). The instructor's Jupyter server and ``course feedback`` use it.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
from functools import cache
from html.parser import HTMLParser

from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from traitlets.config import Config

__all__ = ["SafeToRead", "clean_html", "is_inert_html", "make_safe_to_read", "safe_exporter_config"]

TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "center", "cite", "code", "col", "colgroup", "dd", "del",
    "details", "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i",
    "img", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strike", "strong",
    "sub", "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "tt", "u", "ul", "var",
    "font", "input",
})  # fmt: skip
_COMMON_ATTRIBUTES = frozenset({"class", "title", "align", "lang", "dir", "style"})
ATTRIBUTES = {
    "a": frozenset({"href", "target"}),  # no ``name``: it clobbers globals of the page's scripts, as JupyterLab says
    "font": frozenset({"color"}),
    "input": frozenset({"type", "checked", "disabled"}),  # markdown task lists: a disabled checkbox
    "img": frozenset({"src", "alt", "width", "height"}),
    "td": frozenset({"colspan", "rowspan", "valign"}),
    "th": frozenset({"colspan", "rowspan", "valign", "scope"}),
    "ol": frozenset({"start", "type"}),
    "col": frozenset({"span"}),
    "colgroup": frozenset({"span"}),
    "table": frozenset({"border"}),
    "details": frozenset({"open"}),
    **{f"h{n}": frozenset({"id"}) for n in range(1, 7)},  # nbconvert's heading anchors
}
_URL_ATTRIBUTES = frozenset({"href", "src"})
_LINK_SCHEMES = frozenset({"http", "https", "mailto"})
_IMAGE_DATA = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*\Z", re.IGNORECASE)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
# what a browser ignores in a URL's scheme: ASCII whitespace and controls anywhere (WHATWG URL)
_IGNORED_IN_URL = re.compile(r"[\x00-\x20\x7f]+")
# style="text-align: right" (markdown tables), "color: red": a property of the list, a value without ( \ : or quotes
_STYLE_PROPERTIES = frozenset(
    {"text-align", "vertical-align", "color", "background-color", "font-weight", "font-style", "text-decoration"}
)
_DECLARATION = re.compile(r"([A-Za-z-]+)\s*:\s*([#\w\s.,%-]+)")
_SCRIPT_URL = re.compile(r"(java|vb)script:|livescript:", re.IGNORECASE)
_SAFE_IMAGES = ("image/png", "image/jpeg", "image/gif")
_SAFE_AS_IS = frozenset({"text/plain", "application/json", *_SAFE_IMAGES})
_GENERIC_REPR = re.compile(r"<[\w.]+ object(?: at 0x[0-9a-f]+)?>\Z")
_CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
_TAG_WORD = re.compile(r"[\w.-]{1,100}\Z")
_PLAIN_TEXT = re.compile(r"[\w .+()/-]{0,200}\Z")
_SHOWN_AS_TEXT = "*(Shown as text: this cell held HTML or a link that could run code in a browser.)*"


def _url_ok(name: str, value: str) -> bool:
    """Whether ``value`` of attribute ``name`` (``href``/``src``) is a URL that runs nothing."""
    url = _IGNORED_IN_URL.sub("", html.unescape(value))
    if name == "src" and _IMAGE_DATA.match(url):
        return True
    scheme = _SCHEME.match(url)
    if scheme is None:
        return True  # relative: this page's own origin or a fragment
    return scheme.group(1).lower() in _LINK_SCHEMES


def _style_ok(value: str) -> bool:
    """Whether a ``style`` attribute only sets colours, alignment and font style to plain values (no ``url()``)."""
    declarations = [d.strip() for d in value.split(";") if d.strip()]
    return all(
        (match := _DECLARATION.fullmatch(d)) is not None and match.group(1).lower() in _STYLE_PROPERTIES
        for d in declarations
    )


def _attribute_ok(tag: str, name: str, value: str) -> bool:
    if name not in _COMMON_ATTRIBUTES and name not in ATTRIBUTES.get(tag, ()):
        return False
    if name == "style":
        return _style_ok(value)
    if tag == "input" and name == "type":
        return value.lower() == "checkbox"
    return name not in _URL_ATTRIBUTES or _url_ok(name, value)


class _Inspector(HTMLParser):
    """Finds anything outside the allowlist; comments, declarations and CDATA count as such.

    Browsers and ``html.parser`` disagree on comments (``<!-->``) and raw-text elements;
    every element that parses differently is outside the allowlist, so refusing them all
    leaves no disagreement to exploit.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.active: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            self.active.append(f"<{tag}>")
            return
        for name, value in attrs:
            if not _attribute_ok(tag, name, value or ""):
                self.active.append(f"<{tag} {name}=...>")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag not in TAGS:
            self.active.append(f"</{tag}>")

    def handle_comment(self, data: str) -> None:
        self.active.append("<!--")

    def handle_decl(self, decl: str) -> None:
        self.active.append("<!")

    def unknown_decl(self, data: str) -> None:
        self.active.append("<![")

    def handle_pi(self, data: str) -> None:
        self.active.append("<?")


def active_parts(fragment: str) -> list[str]:
    """What in the HTML ``fragment`` is outside the inert allowlist (empty: nothing)."""
    inspector = _Inspector()
    inspector.feed(fragment)
    inspector.close()
    if inspector.rawdata:  # an unfinished tag or comment at the end
        inspector.active.append("unfinished markup")
    if _SCRIPT_URL.search(_IGNORED_IN_URL.sub("", html.unescape(fragment))):
        inspector.active.append("javascript: URL")
    return inspector.active


def is_inert_html(fragment: str) -> bool:
    """Whether the HTML ``fragment`` holds only allowlisted tags, attributes and URLs."""
    return not active_parts(fragment)


@cache
def _cleaner():
    from bleach.css_sanitizer import CSSSanitizer
    from bleach.sanitizer import Cleaner

    return Cleaner(
        tags=TAGS,
        attributes=_attribute_ok,
        protocols=frozenset({*_LINK_SCHEMES, "data"}),  # data: only for images, by _attribute_ok
        strip=False,
        strip_comments=True,
        css_sanitizer=CSSSanitizer(allowed_css_properties=_STYLE_PROPERTIES),
    )


def clean_html(element: object) -> str:
    """HTML with every tag outside the allowlist escaped (shown as text) and every unsafe attribute removed."""
    text = element.decode() if isinstance(element, bytes) else str(element)
    return _cleaner().clean(text)


def _markdown_html(source: str, attachments: dict) -> str:
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    renderer = IPythonRenderer(escape=False, attachments=attachments, anchor_link_text="¶")
    return MarkdownWithMath(renderer=renderer).render(source)


def _markdown_is_inert(source: str, attachments: dict) -> bool:
    if _is_shown_as_text(source):
        return True
    if _SCRIPT_URL.search(_IGNORED_IN_URL.sub("", html.unescape(source))):
        return False
    try:
        return is_inert_html(_markdown_html(source, attachments))
    except Exception:  # a renderer that fails on it: show it as text
        return False


def as_text_markdown(source: str) -> str:
    """Markdown that every CommonMark renderer shows as ``source``'s literal text (a fenced code block)."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{_SHOWN_AS_TEXT}\n\n{fence}text\n{source}\n{fence}"


def _is_shown_as_text(source: str) -> bool:
    """Whether ``source`` is exactly what ``as_text_markdown`` writes (one fenced block: inert in any renderer)."""
    made = re.fullmatch(re.escape(_SHOWN_AS_TEXT) + r"\n\n(`{3,})text\n(.*)\n\1", source, re.DOTALL)
    return made is not None and as_text_markdown(made.group(2)) == source


def _valid_base64(data: object) -> bool:
    if not isinstance(data, str):
        return False
    try:
        base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _safe_attachments(attachments: object) -> dict:
    kept = {}
    for name, bundle in (attachments or {}).items() if isinstance(attachments, dict) else ():
        if isinstance(bundle, dict) and _TAG_WORD.match(str(name)):
            images = {k: v for k, v in bundle.items() if k in _SAFE_IMAGES and _valid_base64(v)}
            if images:
                kept[name] = images
    return kept


def _plain(value: object) -> object:
    """``value`` with only plain scalars and word-like strings kept (None for anything else)."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, str):
        return value if _PLAIN_TEXT.match(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if _TAG_WORD.match(str(k)) and _plain(v) is not None}
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _output_metadata(metadata: object, mimetypes: set[str]) -> dict:
    """Only numeric ``width``/``height``, at the top and per kept MIME type."""
    kept: dict = {}
    if not isinstance(metadata, dict):
        return kept
    for key in ("width", "height"):
        if _is_number(metadata.get(key)):
            kept[key] = metadata[key]
    for mimetype in mimetypes:
        sizes = metadata.get(mimetype)
        if isinstance(sizes, dict):
            numbers = {k: sizes[k] for k in ("width", "height") if _is_number(sizes.get(k))}
            if numbers:
                kept[mimetype] = numbers
    return kept


def _safe_data(data: dict) -> dict:
    kept = {}
    dropped = []
    plain = data.get("text/plain")
    plain = "".join(plain) if isinstance(plain, list) else plain
    has_own_text = isinstance(plain, str) and not _GENERIC_REPR.match(plain.strip())
    for mimetype, value in data.items():
        text = "".join(value) if isinstance(value, list) else value
        if mimetype in _SAFE_IMAGES:
            if _valid_base64(text):
                kept[mimetype] = text
            else:
                dropped.append(mimetype)
        elif mimetype in _SAFE_AS_IS:
            kept[mimetype] = value
        elif mimetype == "text/latex" and isinstance(text, str):
            if _SCRIPT_URL.search(_IGNORED_IN_URL.sub("", html.unescape(text))):
                dropped.append(mimetype)
            else:
                kept[mimetype] = text
        elif mimetype == "text/html" and isinstance(text, str):
            if is_inert_html(text):
                kept[mimetype] = text
            elif has_own_text:
                dropped.append(mimetype)
            else:
                kept[mimetype] = clean_html(text)
        elif mimetype == "text/markdown" and isinstance(text, str):
            if _markdown_is_inert(text, {}):
                kept[mimetype] = text
            elif has_own_text:
                dropped.append(mimetype)
            else:
                kept["text/plain"] = text
        else:
            dropped.append(mimetype)
    if not kept and dropped:
        kept["text/plain"] = f"[output of type {', '.join(sorted(dropped))} not shown: it could run code in a browser]"
    return kept


def _safe_outputs(outputs: list) -> list:
    for output in outputs:
        if output.get("output_type") in ("display_data", "execute_result", "update_display_data"):
            output["data"] = _safe_data(dict(output.get("data", {})))
            output["metadata"] = _output_metadata(output.get("metadata"), set(output["data"]))
        elif "metadata" in output:
            output["metadata"] = {}
    return outputs


def _cell_metadata(metadata: dict) -> dict:
    from grading.guard import ROLE_KEY

    kept = {key: metadata[key] for key in ("nbgrader", ROLE_KEY) if isinstance(metadata.get(key), dict)}
    tags = metadata.get("tags")
    if isinstance(tags, list):
        kept["tags"] = [tag for tag in tags if isinstance(tag, str) and _TAG_WORD.match(tag)]
    return kept


def make_safe_to_read(nb: NotebookNode) -> NotebookNode:
    """``nb`` with every learner-controlled cell and output unable to run code where it is rendered."""
    from nbformat import from_dict

    taken: set[str] = set()
    for index, cell in enumerate(nb.cells):
        cell["metadata"] = from_dict(_cell_metadata(dict(cell.get("metadata", {}))))
        cell_id = cell.get("id")
        if "id" in cell and (not isinstance(cell_id, str) or not _CELL_ID.match(cell_id) or cell_id in taken):
            cell["id"] = next(f"cell-{index}-{n}" for n in range(len(nb.cells) + 1) if f"cell-{index}-{n}" not in taken)
        if "id" in cell:
            taken.add(cell["id"])
        if cell.get("cell_type") == "markdown":
            source = "".join(cell.source) if isinstance(cell.source, list) else str(cell.source)
            attachments = _safe_attachments(cell.get("attachments"))
            if "attachments" in cell:
                cell["attachments"] = from_dict(attachments)
            if not _markdown_is_inert(source, attachments):
                cell.source = as_text_markdown(source)
        elif cell.get("cell_type") == "code":
            if not isinstance(cell.get("execution_count"), int | None):
                cell["execution_count"] = None
            cell["outputs"] = from_dict(_safe_outputs(list(cell.get("outputs", []))))
    metadata = nb.get("metadata", {})
    nb["metadata"] = from_dict(
        {key: _plain(metadata[key]) for key in ("kernelspec", "language_info") if isinstance(metadata.get(key), dict)}
    )
    return nb


class SafeToRead(Preprocessor):
    """``make_safe_to_read`` as an nbconvert preprocessor (for ``HTMLExporter.preprocessors``)."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        return make_safe_to_read(nb), resources


def safe_exporter_config(config: Config, *, preprocess: bool = True) -> Config:
    """``config`` with nbconvert's ``HTMLExporter`` rendering only what ``make_safe_to_read`` allows.

    ``sanitize_html`` with this module's ``clean_html`` as the filter, and (``preprocess``)
    ``SafeToRead`` added to the exporter's preprocessors. A caller that runs ``SafeToRead``
    itself, in an order of its own, passes ``preprocess=False``.
    """
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.filters = {**config.HTMLExporter.get("filters", {}), "clean_html": f"{__name__}.clean_html"}
    if preprocess:
        configured = list(config.HTMLExporter.get("preprocessors", []))
        config.HTMLExporter.preprocessors = [*configured, f"{__name__}.SafeToRead"]
    return config
