"""The audit hook: the secret, the verdicts, and what is refused; and the guard's check of itself.

Contract: ``_vault(state, token, planted)`` returns the audit hook ``install`` adds
(``sys.addaudithook``: it cannot be removed, and it refuses any later hook). Only its closure
holds ``token`` (no attribute, no global); it answers the grader's protocol events
(``course_grading.*``: check, compiled, pin, run, verify, pending, close) and refuses, and
records, a change to the code or defaults of a recorded function, a second audit hook,
opening ``/proc/*/mem``, ``gc``'s object search by the notebook's code, and frame or trace
access by the notebook's code while a test runs. Every verdict lists what was refused.

Before it trusts any function of the guard to compare the rest, it compares the guard
itself, with C code and names bound in its own closure (``_core``): the namespace of every
module in ``MODULES`` (each name, and that none was added), every name each class of theirs
has or inherits (so that nothing shadows a method), each class's bases, the builtins the
guard's functions use, the state's slots and the test-cell transformer's state. A module of
the guard swapped in ``sys.modules`` or in its package, a function or class rebound, a method
shadowed: each is a change found before the next answer.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from grading.guard.cell import _scrub_execution_record
from grading.guard.protocol import EVENT, HELPERS, MODULES, TEST_FUNCTION, closing, guard
from grading.guard.recheck import _changed, _grouped, _items_changed, _problems, _snaps_changed
from grading.guard.records import _ADDED, _ATTR, _ITEM, _MISSING, _NO_CODES, Record, _names
from grading.guard.trust import _HEAP_TYPE

if TYPE_CHECKING:
    from grading.guard.state import _State

Hook = Callable[[str, tuple[Any, ...]], None]

_FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile"})
_GC_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "gi_code", "cr_code", "ag_code"})
_FUNCTION_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
_WATCHED_EVENTS = _FRAME_EVENTS | _GC_EVENTS | {"object.__setattr__", "object.__getattr__", "sys.addaudithook", "open"}


def _core(state: _State) -> tuple[Record, ...]:
    """The records the audit hook compares itself, before it trusts the guard's functions to compare the rest."""
    import builtins

    spaces = [vars(sys.modules[name]) for name in MODULES]
    core: list[Record] = [
        (_ITEM, space, name, value, f"the grader's {name}") for space in spaces for name, value in space.items()
    ]
    seen: set[tuple[int, str]] = set()
    for space in spaces:
        for cls in [v for v in space.values() if isinstance(v, type) and v.__module__ == space["__name__"]]:
            label = f"the grader's {cls.__name__}"
            core.append((_ATTR, cls, "__mro__", cls.__mro__, f"{label}'s bases"))
            mutable = [klass for klass in cls.__mro__ if klass.__flags__ & _HEAP_TYPE]  # C types cannot change
            for name in sorted({name for klass in cls.__mro__ for name in vars(klass)}):
                for klass in mutable:  # where it is found, and every class before it in the MRO: none shadows it
                    found = vars(klass).get(name, _MISSING)
                    if (id(klass), name) not in seen:
                        seen.add((id(klass), name))
                        core.append((_ITEM, vars(klass), name, found, f"{label}.{name}"))
                    if found is not _MISSING:
                        break
    own = [f for f in state.functions if getattr(f, "__module__", None) in MODULES]  # code and defaults: refused
    for function in own:
        space = vars(sys.modules[function.__module__])
        for name in sorted(_names(function.__code__) & vars(builtins).keys() - space.keys()):
            core.append((_ITEM, vars(builtins), name, vars(builtins)[name], f"builtins.{name}"))
    core.append((_ATTR, state.transformer, "state", state, "the grader's test-cell transformer"))
    return tuple(core)


def _vault(state: _State, token: str | None, planted: list[str]) -> Hook:
    """The audit hook that holds the secret and decides; nothing outside its closure refers to what it keeps."""
    import _thread
    import hmac
    import inspect
    import itertools
    import operator
    import traceback

    mac: Callable[..., bytes]
    try:
        from _hashlib import hmac_digest as mac
    except ImportError:  # Python without OpenSSL
        mac = hmac.digest
    import builtins

    key = (token or "").encode()
    # every name the closures below use is bound here: a global of this module could be shadowed
    get_ident, getframe, length, get = _thread.get_ident, sys._getframe, len, getattr
    isinstance, hasattr, delattr, id, str, bytes, int, tuple, vars = (
        builtins.isinstance, builtins.hasattr, builtins.delattr, builtins.id, builtins.str, builtins.bytes,
        builtins.int, builtins.tuple, builtins.vars,
    )  # fmt: skip
    RuntimeError, missing, item, traceback_type, module_type, function_type, builtin_type = (
        builtins.RuntimeError, _MISSING, _ITEM, types.TracebackType, types.ModuleType, types.FunctionType,
        types.BuiltinFunctionType,
    )  # fmt: skip
    all_, map_, zip_, is_, equal = builtins.all, builtins.map, builtins.zip, operator.is_, operator.eq
    repeat = itertools.repeat
    changed, problems_of, modules, guard_source, closing_source = _changed, _problems, sys.modules, guard, closing
    scrub_record = _scrub_execution_record
    spaces = tuple(vars(sys.modules[name]) for name in MODULES)  # the guard's own modules
    sizes = tuple(length(space) for space in spaces)
    core_items, core_rest, _ = _grouped(state.core)
    in_core = {(id(target), name): value for kind, target, name, value, _label in state.core if kind == _ITEM}
    absent = object()  # not ``missing``: a record that expects a name to be absent is no core record for that
    records = tuple(  # what the core compares first, and identically, is not compared twice
        r for r in state.records if r[0] != _ITEM or in_core.get((id(r[1]), r[2]), absent) is not r[3]
    )
    full_items, full_rest, full_snaps = _grouped(records)
    light_items, light_rest, light_snaps = _grouped(tuple(r for r in records if r[0] != _ADDED))  # not IPython's
    items_changed, snaps_changed, no_codes, code_type = _items_changed, _snaps_changed, _NO_CODES, types.CodeType
    flags = {"verify": False}  # read by the helpers through ``state.pending``, written here alone
    state.pending = types.MappingProxyType(flags)
    slot_names = tuple(name for name in type(state).__slots__ if name not in type(state)._MUTABLE)
    slot_values = tuple(get(state, name) for name in slot_names)
    protected = {id(f): state.labels.get(id(f), f.__qualname__) for f in state.functions}
    helpers = state.helpers
    roots = state.roots
    cache: dict[builtins.str, builtins.bool] = {}
    frame_helpers = frozenset(
        form
        for module in (inspect, traceback)
        if module.__file__
        for form in (module.__file__, os.path.realpath(module.__file__))
    )
    watched_events, prefix, gc_events, frame_events = _WATCHED_EVENTS, EVENT, _GC_EVENTS, _FRAME_EVENTS
    frame_attributes, function_attributes = _FRAME_ATTRIBUTES, _FUNCTION_ATTRIBUTES
    refused: list[builtins.str] = list(planted)  # what the hook refused, reported by every verdict from then on
    phase = ["idle"]  # idle -> armed (after check) -> test (the test cell compiled) -> idle (after close)
    test: dict[builtins.str, Any] = {"file": None, "pins": [], "hidden": (), "codes": None}
    owner: list[builtins.int | None] = [None]  # the thread inside the hook: its own nested events are ignored

    def answer(kind: builtins.str, index: builtins.int) -> builtins.str:
        return mac(key, f"{kind}:{int(index)}".encode(), "sha256").hex()[:32]

    def core_changed() -> list[builtins.str]:
        """The first thing of the guard's own that changed (C code and this closure's names only)."""
        if not all_(map_(equal, map_(length, spaces), sizes)):
            return ["the grader's own module (a name added)"]
        for get_item, targets, names, expected, labels in core_items:
            if not all_(map_(is_, map_(get_item, targets, names, repeat(missing)), expected)):
                for target, name, value, label in zip_(targets, names, expected, labels, strict=True):
                    if get_item(target, name, missing) is not value:
                        return [label]
        for _kind, target, name, value, label in core_rest:  # attributes: the classes' bases, the transformer's state
            if get(target, name, missing) is not value:
                return [label]
        if not all_(map_(is_, map_(get, repeat(state), slot_names, repeat(missing)), slot_values)):
            for name, value in zip_(slot_names, slot_values, strict=True):
                if get(state, name, missing) is not value:
                    return [f"the grader's state ({name})"]
        if get(state, "test_codes", missing) is not (test["codes"] or no_codes):
            return ["the grader's state (test_codes)"]
        return []

    def verify(full: builtins.bool) -> list[builtins.str]:
        labels = core_changed()
        if labels:  # this module's own functions cannot be trusted to compare the rest
            return [f"changed {', '.join(labels)}", *refused]
        labels = items_changed(full_items if full else light_items) + snaps_changed(full_snaps if full else light_snaps)
        labels += changed((full_rest if full else light_rest), roots, cache) + changed(test["pins"], roots, cache)
        labels = list(dict.fromkeys(labels))
        problems = [f"changed {', '.join(labels)}"] if labels else []
        if full:
            problems += problems_of(state, roots, cache)
        return problems + refused

    def caller_untrusted() -> builtins.bool:
        frame: types.FrameType | None = getframe(2)  # 0: this function, 1: the hook, 2: the code that raised the event
        while frame is not None and frame.f_code.co_filename in frame_helpers:
            frame = frame.f_back  # inspect.stack(), traceback.walk_stack(): judge who asked for the frames
        if frame is None:
            return False
        filename = frame.f_code.co_filename
        return filename != test["file"] and not (isinstance(filename, str) and filename.startswith(roots))

    def refuse(what: builtins.str, error: builtins.str) -> None:
        refused.append(f"{what} (refused)")
        raise RuntimeError(f"the grading kernel refused {error}: the submission {what}")

    def requested(source: builtins.str) -> builtins.bool:
        """Whether the kernel is running the grader's own cell (not a call from the submission's code)."""
        kernel = get(state.shell, "kernel", None)
        if kernel is None or not hasattr(kernel, "get_parent"):
            return True
        content = (kernel.get_parent("shell") or {}).get("content", {})
        return content.get("code", source) == source

    def cleanup() -> None:
        shell = state.shell
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(modules["sys"], name):
                delattr(modules["sys"], name)
        for name in ("InteractiveTB", "SyntaxTB"):
            printer = get(shell, name, None)
            for part in (printer, *vars(printer).values()) if hasattr(printer, "__dict__") else ():
                if isinstance(get(part, "tb", None), traceback_type):
                    part.tb = None
        if hasattr(shell, "_last_traceback"):
            shell._last_traceback = None
        result = get(shell, "last_execution_result", None)
        if result is not None and hasattr(result, "error_in_exec"):
            result.error_in_exec = None
        state.user_ns.pop(HELPERS, None)
        state.user_ns.pop(TEST_FUNCTION, None)

    def protocol(event: builtins.str, args: builtins.tuple[Any, ...]) -> None:
        if event == prefix + "installed":
            args[0].append(True)
        elif event == prefix + "check":
            index, hidden, box = args
            if phase[0] != "idle" or not requested(guard_source(index, hidden)):
                refused.append("called the grader's checks itself, out of their order")
            problems = verify(full=True)
            if problems:
                box.append(problems)
                return
            phase[0] = "armed"
            state.armed = test["hidden"] = tuple(hidden)
            state.user_ns[HELPERS] = helpers
            box.append(answer("check", index))
        elif event == prefix + "compiled":
            if phase[0] != "armed":
                refused.append("drove the grader's test-cell protocol itself")
            phase[0], test["file"], test["pins"] = "test", args[0], []
        elif event == prefix + "pin":
            if phase[0] == "test":
                scrub_record(state.shell, test["hidden"])
            space = state.user_ns
            for name in args[0] if phase[0] == "test" else ():
                found = space.get(name, missing)
                if isinstance(found, module_type | function_type | builtin_type | type):
                    test["pins"].append((item, space, name, found, f"the name {name!r}"))
        elif event == prefix + "run":
            if phase[0] != "test" or test["codes"] is not None or not isinstance(args[0], code_type):
                refused.append("drove the grader's test-cell protocol itself")
                return
            codes, pending = [], [args[0]]
            while pending:
                code = pending.pop()
                codes.append(code)
                pending += [c for c in code.co_consts if isinstance(c, code_type)]
            test["keep"] = codes  # alive while the test runs: no id is reused
            test["codes"] = state.test_codes = frozenset(id(code) for code in codes)
        elif event == prefix + "verify":
            if phase[0] != "test":
                refused.append("called the grader's in-test check itself, outside a test")
            flags["verify"] = False
            args[0].append(verify(full=False))
        elif event == prefix + "pending":
            flags["verify"] = True
        elif event == prefix + "close":
            index, box = args
            if phase[0] != "test" or not requested(closing_source(index)):
                refused.append("called the grader's checks itself, out of their order")
            problems = verify(full=True)
            cleanup()
            phase[0], test["file"], test["pins"], state.armed = "idle", None, [], None
            flags["verify"] = False
            test["codes"], test["keep"], state.test_codes = None, None, no_codes
            box.append(problems or answer("close", index))

    def hook(event: builtins.str, args: builtins.tuple[Any, ...]) -> None:
        if event not in watched_events and not event.startswith(prefix):
            return
        if event == "object.__getattr__":  # the most frequent event (every read of a function's __code__)
            if phase[0] != "test" or args[1] not in frame_attributes:
                return
        elif event == "object.__setattr__":
            if args[1] not in function_attributes or id(args[0]) not in protected:
                return
        elif event == "open":
            path = args[0]
            path = path.decode(errors="replace") if isinstance(path, bytes) else path
            if not (isinstance(path, str) and path.startswith("/proc/") and path.endswith("/mem")):
                return
        elif event in frame_events and phase[0] != "test":
            return
        if owner[0] is not None and owner[0] == get_ident():
            return  # an event of the hook's own work
        owner[0] = get_ident()
        try:
            if event.startswith(prefix):
                protocol(event, args)
            elif event == "open":
                refuse("tried to open the kernel's memory (/proc/.../mem)", f"to open {args[0]!r}")
            elif event == "object.__setattr__":
                label = protected[id(args[0])]
                refuse(f"tried to replace the {args[1]} of {label}", f"to replace the {args[1]} it uses")
            elif event == "object.__getattr__":
                if caller_untrusted():
                    refuse(f"tried to look at the test's frames while it ran ({args[1]})", f"access to {args[1]}")
            elif event in gc_events:
                if caller_untrusted():
                    refuse(f"tried to search the interpreter's objects ({event})", f"{event}()")
            elif event in frame_events:
                if phase[0] == "test" and caller_untrusted():
                    refuse(f"tried to look at the test's frames while it ran ({event})", f"{event}()")
            elif event == "sys.addaudithook":
                if caller_untrusted():
                    refused.append("tried to add an audit hook (code that watches the interpreter) (refused)")
                raise RuntimeError("the grading kernel takes no further audit hooks")
        finally:
            owner[0] = None

    return hook
