"""The ipykernel-facing side: the kernel, its app, shell, streams and events.

Owns: the wiring of the runtime into the Jupyter protocol (`ipkernel`), the
objects the kernel hands its control requests (`control`), its comm messages'
busy/idle (`comms`) and the one busy/idle rule (`status`) to, interrupts of
cells not started yet (`pending_cancels`), the options (`options`), the shell
that hands code to the executor (`shell`), output streams that feed the quiet
clock (`streams`), iopub events and the sentences people read (`events`),
reply metadata and cancel status (`metadata`), IPython's per-cell state made
safe for two cells at once (`concurrent_cells`), and every copy of ipykernel /
IPython internals (`upstream`).

May import: ipykernel, IPython, traitlets, jupyter_core, the runtime, the
checkpoints, and the shared pure modules.  Never the agent or the command line.
"""

from __future__ import annotations

from .ipkernel import CancelKernel as CancelKernel

__all__ = ["CancelKernel"]
