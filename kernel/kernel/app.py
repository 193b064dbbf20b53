"""The kernel application: IPKernelApp launching CancelKernel (what the kernelspec's argv runs)."""

from __future__ import annotations

import errno
import sys

import zmq
from ipykernel.kernelapp import IPKernelApp
from traitlets import Type, default

from .. import protocol
from ..checkpoint.settings import CheckpointSettings
from .ipkernel import CancelKernel
from .shell import CancelShell


class CancelKernelApp(IPKernelApp):
    """Launches CancelKernel with output streams that feed the watchdog."""

    name = "cancelkernel"
    kernel_class = Type(
        "cancelkernel.kernel.CancelKernel",
        klass="ipykernel.kernelbase.Kernel",
        help="The Kernel subclass to launch (CancelKernel or a subclass of it).",
    ).tag(config=True)
    # IPKernelApp declares it a plain attribute: mypy refuses a ClassVar here.
    classes = [*IPKernelApp.classes, CancelKernel, CancelShell, CheckpointSettings]  # noqa: RUF012 - never mutated

    @default("outstream_class")
    def _default_outstream_class(self) -> str:
        return "cancelkernel.kernel.streams.CancelOutStream"

    def init_sockets(self) -> None:
        """Stock's, but a port taken by another process exits with EXIT_PORT_IN_USE: the launcher may retry."""
        try:
            super().init_sockets()
        except zmq.ZMQError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            # Every socket made so far closed: one left open (the iopub socket whose bind failed) made the
            # context's term at exit wait forever, a kernel process that never exits.
            if self.context is not None:
                self.context.destroy(linger=0)
            self.log.critical(
                "cancelkernel: %s. Another process took a port of the connection file after the launcher chose it "
                "(the launcher chose it free, then let it go); start the kernel again with new ports.",
                exc,
            )
            sys.exit(protocol.EXIT_PORT_IN_USE)

    def init_signal(self) -> None:
        """Stock ignores SIGINT here; the kernel installs its own handler instead (upstream.py lists this override)."""


def launch(argv: list[str] | None = None) -> None:
    """Start the kernel."""
    CancelKernelApp.launch_instance(argv=argv)
