"""Helpers that drive real kernels and servers: what the tests, the benchmarks and the demo share.

Owns: starting kernels through jupyter_client and always stopping them
(`kernels`), message helpers (`kernels`), waiting on a kernel's state
instead of the clock (`waiting`), real Jupyter servers on loopback with
a token (`servers`), Jupyter Enterprise Gateway from a cached venv of its
own (`gateway_env`, `enterprise_gateway`) and a second host for its kernels,
a network namespace with its own sshd (`remote_host`), a fault-injecting
TCP proxy between a client and a server (`faulty_link`).  May import:
jupyter_client, the standard library, the kernelspec builder, the protocol
names and the frame model.  Nothing of the
package imports it but the command line's demo.
"""

from __future__ import annotations

from .kernels import MODES as MODES
from .kernels import REPLY_TIMEOUT as REPLY_TIMEOUT
from .kernels import START_TIMEOUT as START_TIMEOUT
from .kernels import Kernel as Kernel
from .kernels import checkpoint_request as checkpoint_request
from .kernels import control_request as control_request
from .kernels import create_subshell as create_subshell
from .kernels import drain as drain
from .kernels import drain_channel as drain_channel
from .kernels import execute as execute
from .kernels import interrupt as interrupt
from .kernels import kernels_cleaned_up as kernels_cleaned_up
from .kernels import outputs as outputs
from .kernels import private_kernelspecs as private_kernelspecs
from .kernels import restart as restart
from .kernels import run_cell as run_cell
from .kernels import running_kernel as running_kernel
from .kernels import send_control as send_control
from .kernels import send_execute as send_execute
from .kernels import shutdown_all as shutdown_all
from .kernels import wait_for as wait_for
from .kernels import wait_idle as wait_idle
from .kernels import wait_reply as wait_reply
from .waiting import FileFlag as FileFlag
from .waiting import act_when as act_when
from .waiting import cancel_status as cancel_status
from .waiting import cell_status as cell_status
from .waiting import dump_file_of as dump_file_of
from .waiting import process_exited as process_exited
from .waiting import signal_handled as signal_handled
from .waiting import spare_pid as spare_pid
from .waiting import wait_awaiting as wait_awaiting
from .waiting import wait_dumped_in_cell as wait_dumped_in_cell
from .waiting import wait_no_abandoned_threads as wait_no_abandoned_threads
from .waiting import wait_running as wait_running
from .waiting import wait_state as wait_state
from .waiting import wait_until as wait_until
