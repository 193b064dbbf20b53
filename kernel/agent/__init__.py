"""The agent client: run cells of any Jupyter kernel under budgets, safely.

Interrupt once, take the stack, restart with state when the interrupt cannot
work, and log every intervention.  It speaks the Jupyter protocol only (plus
cancelkernel's extensions when the kernel advertises them).
"""

from __future__ import annotations

from .client import AgentKernel as AgentKernel
from .errors import AgentError as AgentError
from .errors import BadInputError as BadInputError
from .errors import CheckpointError as CheckpointError
from .errors import KernelStartError as KernelStartError
from .errors import RunawayCellError as RunawayCellError
from .log import read_log as read_log
from .result import CellResult as CellResult

__all__ = [
    "AgentError",
    "AgentKernel",
    "BadInputError",
    "CellResult",
    "CheckpointError",
    "KernelStartError",
    "RunawayCellError",
    "read_log",
]
