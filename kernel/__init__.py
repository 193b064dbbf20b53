"""cancelkernel: a Jupyter kernel for Python whose cells can always be stopped.

From a cell: `cancel_requested()` / `raise_if_cancelled()` / `cancellable_sleep()`
are cancel points for loops that want to cooperate (the same flag native code
checks); `fail_after`, `fail_at`, `move_on_after`, `move_on_at` are deadlines.

The package draws the architecture, and data flows one way:

    agent/ (client) -> protocol -> kernel/ -> runtime/ -> native/
                                      \\-> checkpoint/

- `protocol`, `durations`, `frames`: shared pure modules (names; the one
  duration grammar; the one frame model), importable by every side;
- `runtime/`: stopping code (no Jupyter); `kernel/`: the ipykernel side;
  `checkpoint/`: saved state; `agent/`: the client (the protocol only);
  `kernelspec`: the one kernelspec builder; `cli/`: the command line;
  `testing`: helpers that drive real kernels (tests, benchmarks, the demo).

Public names are loaded on first use (PEP 562), so `import cancelkernel.agent`
loads neither the compiled flag nor the deadline machinery.
"""

from __future__ import annotations

import importlib
import typing as t

__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the built JupyterLab extension is (for `jupyter-builder develop`; an install puts it in share/)."""
    from .lab import LAB_NAME

    return [{"src": "labextension", "dest": LAB_NAME}]


# Public name -> the module that defines it.
_PUBLIC = {
    "cancel_requested": "cancelkernel.native",
    "cancellable_sleep": "cancelkernel.native",
    "raise_if_cancelled": "cancelkernel.native",
    "DeadlineExceeded": "cancelkernel.runtime.deadlines",
    "fail_after": "cancelkernel.runtime.deadlines",
    "fail_at": "cancelkernel.runtime.deadlines",
    "move_on_after": "cancelkernel.runtime.deadlines",
    "move_on_at": "cancelkernel.runtime.deadlines",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> t.Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'cancelkernel' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


if t.TYPE_CHECKING:
    from .native import cancel_requested as cancel_requested
    from .native import cancellable_sleep as cancellable_sleep
    from .native import raise_if_cancelled as raise_if_cancelled
    from .runtime.deadlines import DeadlineExceeded as DeadlineExceeded
    from .runtime.deadlines import fail_after as fail_after
    from .runtime.deadlines import fail_at as fail_at
    from .runtime.deadlines import move_on_after as move_on_after
    from .runtime.deadlines import move_on_at as move_on_at
