"""Unit tests: the layout draws the architecture, and nothing crosses a boundary the wrong way.

Imports are read from the source (every `import`, also inside functions), so a
boundary cannot be crossed lazily either.  Rules (each sub-package's
`__init__` says the same in words):

- runtime/: nothing of Jupyter; of ours only native and the shared pure modules
- agent/: the protocol only: never the kernel side, the runtime, native or checkpoint
- native/: nothing of ours
- the shared pure modules (protocol, durations, frames, words): nothing of ours, no third party
- checkpoint/: never the runtime, the kernel side, the agent or the command line
- papermill/: papermill, nbformat and the agent client: never the kernel side, the runtime, native,
  checkpoint or the command line; and the agent never imports papermill (the engine sits on top of it)
- mcp/: the agent client, the shared pure modules, the command line's option types and the MCP SDK: never
  the kernel side, the runtime, native, checkpoint or jupyter_client itself; only the command line imports it
- lab/: the Jupyter Server extension: jupyter_server, the frame model and the kernel's file names only
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
# Source directory of each top-level part of the import package `cancelkernel`.
SOURCES = {"cancelkernel": "kernel", "cancelkernel.native": "native", "cancelkernel.kernelspec": "kernelspec"}
JUPYTER = (
    "ipykernel",
    "IPython",
    "jupyter_client",
    "jupyter_core",
    "traitlets",
    "zmq",
    "tornado",
    "comm",
    "nbformat",
    "nbclient",
    "papermill",
)
PURE = (
    "cancelkernel.protocol",
    "cancelkernel.durations",
    "cancelkernel.frames",
    "cancelkernel.directives",
    "cancelkernel.words",
)


def modules() -> dict[str, str]:
    """Dotted module name -> source file, for every module of the package in the checkout."""
    found: dict[str, str] = {}
    for package, directory in SOURCES.items():
        base = os.path.join(ROOT, directory)
        for dirpath, _, files in os.walk(base):
            for name in files:
                if not name.endswith((".py", ".pyx")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), base)
                parts = rel[: rel.rindex(".")].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join([package, *parts])] = os.path.join(dirpath, name)
    return found


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def imports_of(module: str, path: str) -> set[str]:
    """Absolute names of everything `path` imports (relative imports resolved)."""
    if path.endswith(".pyx"):
        return set()  # Cython: checked by the native rule through its .py siblings and the .c sources
    tree = ast.parse(_read(path), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def crosses(name: str, forbidden: tuple[str, ...]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


OURS = (
    "cancelkernel.runtime",
    "cancelkernel.kernel",
    "cancelkernel.agent",
    "cancelkernel.checkpoint",
    "cancelkernel.cli",
    "cancelkernel.native",
    "cancelkernel.papermill",
)
RULES = [
    ("cancelkernel.runtime", (*JUPYTER, *OURS[1:5], "cancelkernel.testing", "cancelkernel.kernelspec")),
    (
        "cancelkernel.agent",
        (
            "ipykernel",
            "IPython",
            "cancelkernel.kernel",
            "cancelkernel.runtime",
            "cancelkernel.native",
            "cancelkernel.checkpoint",
            "cancelkernel.cli",
            "cancelkernel.testing",
            "papermill",
            "cancelkernel.papermill",
        ),
    ),
    (
        "cancelkernel.papermill",
        (
            "ipykernel",
            "IPython",
            "cancelkernel.kernel",
            "cancelkernel.runtime",
            "cancelkernel.native",
            "cancelkernel.checkpoint",
            "cancelkernel.cli",
            "cancelkernel.testing",
        ),
    ),
    ("cancelkernel.native", (*OURS[:5], *PURE)),
    (
        "cancelkernel.checkpoint",
        (
            "cancelkernel.runtime",
            "cancelkernel.kernel",
            "cancelkernel.agent",
            "cancelkernel.cli",
            "cancelkernel.native",
            "cancelkernel.papermill",
            "ipykernel",
            "jupyter_client",
            "zmq",
        ),
    ),
    *((pure, (*JUPYTER, *OURS)) for pure in PURE),
    (
        "cancelkernel.mcp",
        (
            "ipykernel",
            "IPython",
            "jupyter_client",
            "zmq",
            "cancelkernel.kernel",
            "cancelkernel.runtime",
            "cancelkernel.native",
            "cancelkernel.checkpoint",
            "cancelkernel.testing",
            "cancelkernel.papermill",
        ),
    ),
    (
        "cancelkernel.lab",
        (
            "ipykernel",
            "IPython",
            "cancelkernel.kernel",
            "cancelkernel.runtime",
            "cancelkernel.native",
            "cancelkernel.checkpoint",
            "cancelkernel.agent",
            "cancelkernel.testing",
            "cancelkernel.mcp",
            "cancelkernel.papermill",
        ),
    ),
]


@pytest.mark.parametrize(("owner", "forbidden"), RULES, ids=[r[0] for r in RULES])
def test_no_import_crosses_a_boundary(owner: str, forbidden: tuple[str, ...]) -> None:
    found = {m: p for m, p in modules().items() if m == owner or m.startswith(owner + ".")}
    assert found, f"no modules found for {owner}"
    wrong = sorted((m, name) for m, p in found.items() for name in imports_of(m, p) if crosses(name, forbidden))
    assert wrong == [], f"{owner} must not import {forbidden}; found (module, import): {wrong}"


def test_the_mcp_server_sits_on_top() -> None:
    """mcp/ takes only the option types from the command line, and only the command line imports mcp/."""
    found = modules()
    wrong = sorted(
        (m, name)
        for m, p in found.items()
        for name in imports_of(m, p)
        if (
            m.startswith("cancelkernel.mcp")
            and crosses(name, ("cancelkernel.cli",))
            and not crosses(name, ("cancelkernel.cli.options",))
        )
        or (crosses(name, ("cancelkernel.mcp",)) and not m.startswith(("cancelkernel.mcp", "cancelkernel.cli")))
    )
    assert wrong == [], f"(module, import) across the MCP server's boundary: {wrong}"


def test_every_import_of_ours_names_a_module_that_exists() -> None:
    known = modules()
    missing = []
    for module, path in known.items():
        for name in imports_of(module, path):
            if not name.startswith("cancelkernel"):
                continue
            parent = name.rpartition(".")[0]
            if name not in known and parent not in known:
                missing.append((module, name))
    assert missing == []


def test_every_subpackage_says_what_it_owns_and_may_import() -> None:
    for module, path in modules().items():
        if path.endswith("__init__.py") and module.count(".") == 1 and module != "cancelkernel.native":
            doc = ast.get_docstring(ast.parse(_read(path))) or ""
            assert "Owns" in doc, f"{module}'s __init__ docstring must say what it owns and may import"
            assert "import" in doc, f"{module}'s __init__ docstring must say what it owns and may import"


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, cwd="/")
    return set(out.stdout.split())


def test_the_client_import_is_cheap() -> None:
    loaded = _loaded_after("import cancelkernel.agent")
    heavy = {
        "cancelkernel.native._flag",
        "cancelkernel.native",
        "ipykernel",
        "IPython",
        "cancelkernel.runtime.deadlines",
        "jupyter_client",
        "zmq",
    }
    assert loaded & heavy == set()
    loaded = _loaded_after("from cancelkernel.agent import AgentKernel")
    assert (
        loaded
        & {"cancelkernel.native._flag", "cancelkernel.native", "ipykernel", "IPython", "cancelkernel.runtime.deadlines"}
        == set()
    )


def test_public_names_are_unchanged() -> None:
    import cancelkernel
    import cancelkernel.agent as agent
    from cancelkernel.kernel import CancelKernel

    for name in (
        "fail_after",
        "fail_at",
        "move_on_after",
        "move_on_at",
        "DeadlineExceeded",
        "cancel_requested",
        "raise_if_cancelled",
        "cancellable_sleep",
    ):
        assert callable(getattr(cancelkernel, name))
        assert name in cancelkernel.__all__
    for name in (
        "AgentKernel",
        "CellResult",
        "RunawayCellError",
        "BadInputError",
        "KernelStartError",
        "CheckpointError",
        "AgentError",
        "read_log",
    ):
        assert getattr(agent, name) is not None
        assert name in agent.__all__
    assert CancelKernel.__module__ == "cancelkernel.kernel.ipkernel"
    with pytest.raises(AttributeError):
        cancelkernel.no_such_name  # noqa: B018
