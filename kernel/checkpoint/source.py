"""Functions and classes defined in cells, saved as their source and run again on restore.

IPython keeps every cell's source in `linecache`, so a function's source is
`inspect.getsource(f)`.  Classes are harder (`inspect` looks for the file of
module `__main__`, which cells do not have): we find the `class` statement in
the cell that defined one of its methods, or else in the newest cell that
defines a class of that name.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import linecache
import textwrap
import types
from collections.abc import Callable, Iterable

# Counter for the names of re-run sources, so each one has its own linecache entry.
_counter = itertools.count(1)


class NoSource(Exception):
    """The source of a function or class cannot be found or cannot be re-run alone."""


def is_cell_defined(value: object, module_name: str) -> bool:
    """A function or class whose home is the notebook's namespace (its module is `module_name`).

    A decorated function counts when the decorator kept `__wrapped__` (functools.wraps,
    lru_cache): re-running its source re-applies the decorator.
    """
    if getattr(value, "__module__", None) != module_name:
        return False
    if isinstance(value, (types.FunctionType, type)):
        return True
    return _wrapped_function(value) is not None


def _wrapped_function(value: object) -> types.FunctionType | None:
    try:
        inner = inspect.unwrap(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None
    return inner if isinstance(inner, types.FunctionType) and inner is not value else None


def source_of(value: object, cell_files: Iterable[str] | None = None) -> tuple[str, str]:
    """(source, the name the source defines) of a top-level function or class defined in a cell.

    `cell_files` are the linecache file names of cells, newest first, searched for a
    class whose methods do not point to their cell (e.g. a dataclass without methods).
    """
    qualname = getattr(value, "__qualname__", "")
    if "<locals>" in qualname:
        raise NoSource(
            "it was made inside a function (a closure or local class); its source alone cannot recreate it, "
            "so call the function that makes it again"
        )
    if isinstance(value, type):
        if "." in qualname:
            raise NoSource("it is nested in another class; it comes back with that class")
        return _class_source(value, cell_files), value.__name__
    fn = value if isinstance(value, types.FunctionType) else _wrapped_function(value)
    if fn is None:
        raise NoSource("it is not a function or class")
    return _function_source(fn)


def _function_source(fn: types.FunctionType) -> tuple[str, str]:
    if fn.__code__.co_filename == "<string>":  # exec() of a string: 3.13's linecache may hand back unrelated lines
        raise NoSource("its source is not available (it was made by exec() of a string)")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise NoSource(
            f"its source is not available ({exc}); it was probably made by exec() or in a file since changed"
        ) from None
    tree = _parse(source)
    if fn.__name__ == "<lambda>":
        return _lambda_source(source, tree)
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(tree.body) != 1 or len(defs) != 1 or defs[0].name != fn.__name__:
        raise NoSource("its source is not a single function definition")
    return source, fn.__name__


def _lambda_source(source: str, tree: ast.Module) -> tuple[str, str]:
    """`name = lambda ...` on its own line(s) is re-runnable; a lambda inside an expression is not."""
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)]
    stmt = tree.body[0] if len(tree.body) == 1 else None
    if (
        len(lambdas) == 1
        and isinstance(stmt, ast.Assign)
        and len(stmt.targets) == 1
        and isinstance(stmt.targets[0], ast.Name)
        and stmt.value is lambdas[0]
    ):
        return source, stmt.targets[0].id
    raise NoSource("it is a lambda inside a larger expression; give it a def, or re-run its cell")


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise NoSource(f"its source does not parse on its own ({exc.msg}); it may use cell magics") from None


def _class_source(cls: type, cell_files: Iterable[str] | None) -> str:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
        # 3.13 takes __firstlineno__ in the module's file, whichever file the class was defined in: check it.
        if _defines_class(source, cls.__name__):
            return source
    except (OSError, TypeError, SyntaxError):
        pass  # the usual case in a notebook: module __main__ has no file
    lineno = getattr(cls, "__firstlineno__", None)  # Python 3.13+
    for filename, line in _method_lines(cls):
        found = _find_class(filename, cls.__name__, lineno or line)
        if found is not None:
            return found
    for filename in cell_files if cell_files is not None else default_cell_files():
        found = _find_class(filename, cls.__name__, None)
        if found is not None:
            return found
    raise NoSource("no cell still holds its class statement")


def _defines_class(source: str, name: str) -> bool:
    body = ast.parse(source).body
    return len(body) == 1 and isinstance(body[0], ast.ClassDef) and body[0].name == name


def _method_lines(cls: type) -> Iterable[tuple[str, int]]:
    """(file, first line) of the functions defined in the class body itself."""
    for attr in vars(cls).values():
        fn = attr
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        elif isinstance(fn, property):
            fn = fn.fget
        code = getattr(fn, "__code__", None)
        if code is not None and getattr(fn, "__qualname__", "").startswith(cls.__qualname__ + "."):
            yield code.co_filename, code.co_firstlineno


def _find_class(filename: str, name: str, line: int | None) -> str | None:
    """Source of the top-level `class name` in a cached file (containing `line`, if given), decorators included."""
    lines = linecache.getlines(filename)
    if not lines:
        return None
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            end = node.end_lineno or node.lineno
            if line is None or start <= line <= end:
                found = "".join(lines[start - 1 : end])  # the last definition in a cell wins, as when it ran
    return found


def default_cell_files() -> list[str]:
    """Sources registered in linecache without a file on disk (cells, re-run sources), newest first."""
    return [name for name, entry in reversed(list(linecache.cache.items())) if len(entry) == 4 and entry[1] is None]


def run_source(source: str, label: str, namespace: dict) -> None:
    """Run a saved definition in `namespace`, registered in linecache so it can be saved again later."""
    filename = f"<checkpoint {label} #{next(_counter)}>"
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    exec(compile(source, filename, "exec"), namespace)


RunSource = Callable[[str, str, dict], None]
