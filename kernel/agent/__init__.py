"""The agent client: run cells of any Jupyter kernel under budgets, safely.

Interrupt once, take the stack, restart with state when the interrupt cannot
work, and log every intervention.  It speaks the Jupyter protocol only (plus
cancelkernel's extensions when the kernel advertises them).

Owns, in layers: transports (`transport/`: how messages travel), lifecycles
(`lifecycle/`: how a kernel is started, restarted, stopped), the link
(`link`: requests and replies), the policy (`policy`, `run`, `tripwire`, `budgets`) and
what it returns (`result`, `outputs`, `log`, `history`, `checkpoints`,
`notebook`), behind `AgentKernel` (`client`).  May import: jupyter_client,
zmq, the shared pure modules and `cancelkernel.kernelspec`.  Never the
kernel side, the runtime, the native flag or the checkpoints package (a test
checks), so `import cancelkernel.agent` stays cheap; names load on first use.
"""

from __future__ import annotations

import importlib
import typing as t

_PUBLIC = {
    "AgentKernel": "cancelkernel.agent.client",
    "AgentError": "cancelkernel.agent.errors",
    "BadInputError": "cancelkernel.agent.errors",
    "CheckpointError": "cancelkernel.agent.errors",
    "KernelStartError": "cancelkernel.agent.errors",
    "RunawayCellError": "cancelkernel.agent.errors",
    "read_log": "cancelkernel.agent.log",
    "CellResult": "cancelkernel.agent.result",
    "CellWatch": "cancelkernel.agent.watch",
    "Submission": "cancelkernel.agent.submission",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> t.Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'cancelkernel.agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


if t.TYPE_CHECKING:
    from .client import AgentKernel as AgentKernel
    from .errors import AgentError as AgentError
    from .errors import BadInputError as BadInputError
    from .errors import CheckpointError as CheckpointError
    from .errors import KernelStartError as KernelStartError
    from .errors import RunawayCellError as RunawayCellError
    from .log import read_log as read_log
    from .result import CellResult as CellResult
    from .submission import Submission as Submission
    from .watch import CellWatch as CellWatch
