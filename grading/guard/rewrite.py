"""The test cell rewritten: a function of its own, whose every value, call, item and comparison is checked.

Contract: ``_rewrite(tree, show)`` returns the module IPython runs in place of a test cell
(README, "What a test cell means"). Its body becomes the function ``__course_test__``, called
by the ``run`` helper with the helpers' tuple as its one argument: a name the cell declares
``global``, or first reads or deletes, is the notebook's (``global`` in that function); a name
it binds first is a local the code under test cannot read or rebind, copied to the namespace
when the test ends; the names it only reads are pinned. Every value it reads (names, call
results, attributes, items), every ``assert`` and every single comparison passes through a
helper (positions: ``grading.guard.protocol``); the cell's last value is returned for the
``run`` helper to display, unless the cell ends in ``;`` (``show``). A cell whose code cannot
live in a function (top-level ``await``, ``yield``, ``return``, ``nonlocal``, ``import *``) is
rewritten in place instead.
"""

from __future__ import annotations

import ast
import sys
from typing import cast

from grading.guard.lying import _OPERATORS
from grading.guard.protocol import (
    AFTER,
    CALL,
    COMPARE,
    DISPLAY,
    EXPORT,
    HELPERS,
    INITIAL,
    KEY,
    LOCAL,
    LOCALS,
    MARK,
    PIN,
    RESULT,
    RETURNED,
    RUN,
    TEST_FUNCTION,
    TRUTH,
    VALUE,
)


def _helper(
    local: bool, index: int, node: ast.AST, *args: ast.expr, keywords: list[ast.keyword] | None = None
) -> ast.Call:
    """``__course_g__[index](*args)`` (inside the test's function) or ``__course_grading__[index](*args)``."""
    tuple_ = ast.Name(id=LOCAL if local else HELPERS, ctx=ast.Load())
    func = ast.Subscript(value=tuple_, slice=ast.Constant(index), ctx=ast.Load())
    return ast.copy_location(ast.Call(func=func, args=list(args), keywords=keywords or []), node)


# builtins that act on the frame that calls them: called by the test itself, then everything is compared
_FRAME_BUILTINS = frozenset({"super", "locals", "globals", "vars", "dir", "eval", "exec", "breakpoint"})


class _Rewriter(ast.NodeTransformer):
    """Routes every value a test reads, every call, attribute, item, assert and comparison through the helpers."""

    def __init__(self, local: bool) -> None:
        self.local = local

    def _wrap(self, index: int, node: ast.expr, *args: ast.expr) -> ast.Call:
        """``helper[index](*args)`` (``node`` itself when no ``args``), at ``node``'s place."""
        return _helper(self.local, index, node, *(args or (node,)))

    def visit_Name(self, node: ast.Name) -> ast.expr:
        """A name the test reads: its value inspected."""
        if isinstance(node.ctx, ast.Load) and node.id not in (HELPERS, LOCAL):
            return self._wrap(VALUE, node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.expr:
        """``after(call(f, *args)())``; a frame builtin's call (``locals()``, ``eval``) as ``returned(...)``."""
        frame = isinstance(node.func, ast.Name) and node.func.id in _FRAME_BUILTINS
        self.generic_visit(node)
        if frame:  # ``super()``, ``locals()``, ``eval(...)`` must run in the test's own frame
            return self._wrap(RETURNED, node)
        ready = _helper(self.local, CALL, node, node.func, *node.args, keywords=node.keywords)
        return self._wrap(AFTER, node, ast.copy_location(ast.Call(func=ready, args=[], keywords=[]), node))

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        """``after(mark(owner).name)`` when read."""
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        node.value = self._wrap(MARK, node.value, node.value)
        return self._wrap(AFTER, node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        """``after(mark(owner)[key(item)])`` when read."""
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        node.value = self._wrap(MARK, node.value, node.value)
        if not isinstance(node.slice, ast.Slice):
            node.slice = self._wrap(KEY, node.slice, node.slice)
        return self._wrap(AFTER, node)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        """A single comparison as ``compare(left, op, right)`` (chains are left as they are)."""
        self.generic_visit(node)
        op = type(node.ops[0]).__name__
        if len(node.ops) == 1 and op in _OPERATORS:
            return self._wrap(COMPARE, node, node.left, ast.Constant(op), node.comparators[0])
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        """``assert truth(test)``."""
        self.generic_visit(node)
        node.test = self._wrap(TRUTH, node.test, node.test)
        return node


class _TopLevel(ast.NodeVisitor):
    """Finds what a function body cannot hold: top-level await, yield, return, nonlocal, ``import *``."""

    def __init__(self) -> None:
        self.blocked = False

    def generic_visit(self, node: ast.AST) -> None:
        """Marks what a function body cannot hold; does not enter nested scopes."""
        if isinstance(
            node, ast.Await | ast.AsyncFor | ast.AsyncWith | ast.Yield | ast.YieldFrom | ast.Return | ast.Nonlocal
        ):
            self.blocked = True
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            self.blocked = True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            super().generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        """Each top-level statement."""
        for statement in node.body:
            self.visit(statement)


class _FirstUse(ast.NodeVisitor):
    """How the test's own scope first uses each name, in the order Python evaluates it: load, store or del.

    Nested scopes (function, lambda and class bodies, comprehensions past their first iterable)
    are not the test's own, except for what they evaluate where they are defined (decorators,
    defaults, bases) and the targets of ``:=``, which bind in the test's scope.
    """

    def __init__(self) -> None:
        self.first: dict[str, str] = {}

    def use(self, name: str, how: str) -> None:
        """Record ``how`` (``load``, ``store``, ``del``) unless the name was used before."""
        self.first.setdefault(name, how)

    def visit_Name(self, node: ast.Name) -> None:
        self.use(node.id, {ast.Load: "load", ast.Store: "store", ast.Del: "del"}[type(node.ctx)])

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.use(node.target.id, "load")  # ``x += 1`` reads x first
        else:
            self.visit(node.target)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.visit(node.target)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.visit(node.target)
        for statement in (*node.body, *node.orelse):
            self.visit(statement)

    visit_AsyncFor = visit_For

    def _definition(self, node: ast.AST, name: str | None) -> None:
        """What a definition evaluates where it stands (decorators, defaults, bases), then its name bound."""
        for part in (*getattr(node, "decorator_list", ()), *getattr(node, "bases", ())):
            self.visit(part)
        for keyword in getattr(node, "keywords", ()):
            self.visit(keyword.value)
        arguments = getattr(node, "args", None)
        if isinstance(arguments, ast.arguments):
            for default in (*arguments.defaults, *[d for d in arguments.kw_defaults if d is not None]):
                self.visit(default)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            for inner in ast.walk(node):  # ``:=`` in a comprehension binds in the test's scope
                if isinstance(inner, ast.NamedExpr):
                    self.visit(inner.target)
        if name is not None:
            self.use(name, "store")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self._definition(node, node.name)

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._definition(node, None)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) -> None:
        self.visit(node.generators[0].iter)
        self._definition(node, None)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            self.use(alias.asname or alias.name.split(".")[0], "store")

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.use(node.name, "store")
        for statement in node.body:
            self.visit(statement)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self.use(node.name, "store")

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.use(node.name, "store")

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self.generic_visit(node)
        if node.rest:
            self.use(node.rest, "store")

    def visit_Global(self, node: ast.Global) -> None:
        pass


def _function(body: list[ast.stmt], params: list[str]) -> ast.FunctionDef:
    """``def __course_test__(params): body``."""
    arguments = ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=p) for p in params], kwonlyargs=[], kw_defaults=[], defaults=[]
    )
    if sys.version_info >= (3, 12):  # type parameters exist from 3.12 on
        return ast.FunctionDef(
            name=TEST_FUNCTION,
            args=arguments,
            body=body or [ast.Pass()],
            decorator_list=[],
            returns=None,
            type_params=[],
        )
    return ast.FunctionDef(
        name=TEST_FUNCTION, args=arguments, body=body or [ast.Pass()], decorator_list=[], returns=None
    )


def _scopes(body: list[ast.stmt]) -> tuple[list[str], list[str], list[str]]:
    """(the test's own variables, the notebook's names it binds or deletes, the names it only reads).

    Module semantics where the test relies on the notebook: a name the cell declares ``global``
    (anywhere in it), or whose first use in its own scope reads or deletes it (``orig = squares;
    del squares``), is the notebook's: the test acts on the namespace at once. A name the test
    binds first is its own variable until the test ends, so code under test cannot read it.
    """
    import symtable

    declared = {
        name
        for node in ast.walk(ast.Module(body=body, type_ignores=[]))
        if isinstance(node, ast.Global)
        for name in node.names
    }
    finder = _FirstUse()
    for statement in body:
        finder.visit(statement)
    source = ast.unparse(ast.fix_missing_locations(ast.Module(body=[_function(body, [])], type_ignores=[])))
    table = symtable.symtable(source, "<test>", "exec").get_children()[0]
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_local()}
    notebook = {n for n in bound if n in declared or finder.first.get(n, "store") != "store"}
    own = bound - notebook
    written: set[str] = set(notebook)
    read: set[str] = set()
    pending = [table]
    while pending:
        scope = pending.pop()
        for symbol in scope.get_symbols():
            if symbol.is_global() and symbol.is_assigned():
                written.add(symbol.get_name())
            elif symbol.is_global() and symbol.is_referenced():
                read.add(symbol.get_name())
        pending += scope.get_children()
    skip = {n for n in bound if n.startswith("__course")}
    return sorted(own - skip), sorted(notebook - skip), sorted(read - written - own)


def _rewrite(tree: ast.Module, show: bool) -> ast.Module:
    """The test cell as a function of its own, or, when its code cannot live in one, rewritten in place."""
    body = tree.body
    last = body[-1] if body and isinstance(body[-1], ast.Expr) else None
    finder = _TopLevel()
    finder.visit(tree)
    if finder.blocked:  # top-level await or the like: rewritten in place, its value displayed by the helper
        tree = _Rewriter(local=False).visit(tree)
        if last is not None:
            end = cast(ast.Expr, tree.body[-1])  # the rewriter keeps a statement's kind
            tree.body[-1] = ast.copy_location(
                ast.Expr(_helper(False, DISPLAY, end, end.value, ast.Constant(show))), end
            )
        return ast.fix_missing_locations(tree)
    own, notebook, read = _scopes(body)
    body = [ast.copy_location(ast.Pass(), s) if isinstance(s, ast.Global) else s for s in body]  # declared below
    statements = [_Rewriter(local=True).visit(statement) for statement in body]
    if last is not None:
        end = cast(ast.Expr, statements[-1])  # the rewriter keeps a statement's kind
        statements[-1] = ast.copy_location(
            ast.Assign(targets=[ast.Name(id=RESULT, ctx=ast.Store())], value=end.value), end
        )
    prologue: list[ast.stmt] = [ast.Global(names=notebook)] if notebook else []
    for name in own:
        prologue += ast.parse(f"try:\n    {name} = {LOCAL}[{INITIAL}]({name!r})\nexcept KeyError:\n    pass").body
    prologue += ast.parse(f"{LOCAL}[{PIN}]({tuple(read)!r})").body
    export = ast.parse(f"{LOCAL}[{EXPORT}]({LOCAL}[{LOCALS}](), {tuple(own)!r})").body
    function = _function(
        [*prologue, ast.Try(body=statements or [ast.Pass()], handlers=[], orelse=[], finalbody=export)], [LOCAL]
    )
    if last is not None:
        function.body.append(ast.Return(value=ast.Name(id=RESULT, ctx=ast.Load())))
    call = ast.parse(f"{HELPERS}[{RUN}]({TEST_FUNCTION}, {show and last is not None!r})").body
    module = ast.Module(body=[function, *call], type_ignores=[])
    if body:
        ast.copy_location(function, body[0])
    return ast.fix_missing_locations(module)
