"""Before anything runs: a handler whose source enters a stage its plan lacks is refused.

`ctx.stage("DOWNLOADING")` in a handler registered without ``stages=`` would fail every
attempt at run time; read from the source, the mistake stops the worker at start with the
same words `JobContext.stage()` would raise (`UndeclaredStage`).

A best effort that never refuses a valid handler: only a call on the handler's own context
parameter with a string literal is judged (``ctx.stage(code)``, ``ctx.stage(f"...")`` and
calls in helpers are left to the check at the call). A handler whose source cannot be
read or parsed (a lambda, a callable object, a partial, code without source files), or
that rebinds its context parameter, is not judged at all.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterable

from jobwire.worker.sdk._errors import UndeclaredStage
from jobwire.worker.sdk._handlers import HandlerSpec


def check_stages(specs: Iterable[HandlerSpec]) -> None:
    """Raise UndeclaredStage for the first handler whose source enters a stage not in its plan."""
    for spec in specs:
        plan = [stage.code for stage in spec.stages]
        for code, line in literal_stages(spec.fn):
            if code not in plan:
                raise UndeclaredStage(spec.job_type, code, plan, where=f"handler {_name(spec.fn)} ({line})")


def literal_stages(fn: object) -> list[tuple[str, str]]:
    """Each ``<context>.stage("LITERAL")`` call in `fn`'s own source: the code and ``file:line``."""
    found = _function_node(fn)
    if found is None:
        return []
    node, first_line = found
    params = [*node.args.posonlyargs, *node.args.args]
    skip = 1 if inspect.ismethod(fn) else 0  # a bound method's first parameter is self
    if len(params) <= skip:
        return []
    ctx = params[skip].arg
    if _rebinds(node, ctx):
        return []
    file = inspect.getsourcefile(fn) or "?"  # type: ignore[arg-type]
    where = f"{file.rsplit('/', 1)[-1]}:"
    return [(code, f"{where}{first_line + call.lineno - 1}") for call, code in _stage_calls(node, ctx)]


def _function_node(fn: object) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
    """The parsed def of `fn` and the line it starts on, or None when it cannot be read."""
    if not inspect.isfunction(fn) and not inspect.ismethod(fn):
        return None  # a partial, a callable object, a builtin: nothing to read
    if fn.__name__ == "<lambda>":
        return None  # its source line may hold other lambdas, and a lambda enters few stages
    try:
        lines, first_line = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    return node, max(first_line, 1)  # the parsed lines count from the first (a decorator's, if any)


def _rebinds(node: ast.AST, name: str) -> bool:
    """True when the body assigns `name`, or a nested function or comprehension takes it as its own."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id == name and isinstance(inner.ctx, ast.Store | ast.Del):
            return True
        if isinstance(inner, ast.ExceptHandler) and inner.name == name:
            return True
        if inner is not node and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = inner.args
            if name in {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}:
                return True
    return False


def _stage_calls(node: ast.AST, ctx: str) -> list[tuple[ast.Call, str]]:
    calls = []
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "stage"):
            continue
        if not (isinstance(func.value, ast.Name) and func.value.id == ctx):
            continue
        args = [*call.args, *(k.value for k in call.keywords if k.arg == "code")]
        if len(args) == 1 and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
            calls.append((call, args[0].value))
    return calls


def _name(fn: object) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
