"""Every name of our Jupyter protocol extensions, in one place: messages, features, codes.

Data only, importing nothing but typing: the kernel, the runtime and the agent
client all take their names from here, so a name cannot be spelled two ways.
Each enumerated value is one Literal type with its tuple of values beside it.
Each field is documented in docs/protocol.md.
"""

from __future__ import annotations

import typing as t

# Version of the extension protocol, advertised in kernel_info_reply and the kernelspec.
PROTOCOL_VERSION = "1.0"

# The Jupyter messaging protocol version our kernelspec declares (what ipykernel implements).
KERNEL_PROTOCOL_VERSION = "5.5"

# Where user code runs (CancelKernel.exec_thread, `--exec-thread`, the MCP server's and the tests' modes).
ExecThread = t.Literal["main", "worker"]
EXEC_THREADS: tuple[ExecThread, ...] = t.get_args(ExecThread)
# How a kernelspec asks for interrupts (its `interrupt_mode`).
InterruptMode = t.Literal["signal", "message"]
INTERRUPT_MODES: tuple[InterruptMode, ...] = t.get_args(InterruptMode)
# The agent client's automatic checkpoints (AgentKernel(checkpoint=...), `--checkpoint`).
CheckpointMode = t.Literal["off", "before-risky", "after-ok"]
CHECKPOINT_MODES: tuple[CheckpointMode, ...] = t.get_args(CheckpointMode)
# The environment variable that names a kernel's checkpoint root (CheckpointSettings.root; docs/checkpoints.md).
CHECKPOINT_ROOT_ENV = "CANCELKERNEL_CHECKPOINT_ROOT"
# Enterprise Gateway's name of a kernel in that kernel's environment, the same across its restarts (the key of its
# checkpoint directory under the root).
KERNEL_ID_ENV = "KERNEL_ID"

# Key in kernel_info_reply content, kernelspec metadata, execute_request and execute_reply metadata.
KEY = "cancelkernel"

# Added to kernel_info_reply["supported_features"] so clients can detect us.
FEATURE = "cancelkernel"

# -- messages ----------------------------------------------------------------------

# Control channel: what runs, for how long, its state.
CANCEL_STATUS_REQUEST = "cancel_status_request"
CANCEL_STATUS_REPLY = "cancel_status_reply"

# Shell channel: save / restore / list / drop saved state (between cells only).
CHECKPOINT_REQUEST = "checkpoint_request"
CHECKPOINT_REPLY = "checkpoint_reply"

# Stock message names we send or answer with our own content.
INTERRUPT_REQUEST = "interrupt_request"
INTERRUPT_REPLY = "interrupt_reply"

# -- features advertised in kernel_info_reply content[KEY]["features"] ----------------

FEATURE_TARGETED_INTERRUPT = "targeted_interrupt"
FEATURE_CANCEL_STATUS = "cancel_status"
FEATURE_REPLY_METADATA = "reply_metadata"
FEATURE_BUDGETS = "budgets"
FEATURE_DEADLINES = "deadlines"
FEATURE_EVENTS = "events"
FEATURE_DUMP_FILE = "dump_file"
FEATURE_CHECKPOINT = "checkpoint"

FEATURES = (
    FEATURE_TARGETED_INTERRUPT,
    FEATURE_CANCEL_STATUS,
    FEATURE_REPLY_METADATA,
    FEATURE_BUDGETS,
    FEATURE_DEADLINES,
    FEATURE_EVENTS,
    FEATURE_DUMP_FILE,
    FEATURE_CHECKPOINT,
)

# -- kernel_info_reply `execution_state` (top level, the JEP pre-proposal #132): the main shell's status --

KERNEL_EXECUTION_STATE = "execution_state"
KERNEL_BUSY = "busy"
KERNEL_IDLE = "idle"

# -- execution states (cancel_status_reply, kernel_info_reply cancelkernel.executions) --

STATE_IDLE = "idle"
STATE_RUNNING = "running"
STATE_CANCELLING = "cancelling"
STATE_UNRESPONSIVE = "unresponsive-to-interrupt"

# -- why the kernel cancelled an execution (execute_reply metadata.cancelkernel.reason) --

REASON_REQUEST = "request"
REASON_SIGNAL = "signal"
REASON_WALL_BUDGET = "wall_budget"
REASON_QUIET_BUDGET = "quiet_budget"
REASON_MEMORY_BUDGET = "memory_budget"  # the cell's own budget or the kernel's guard below its memory limit
REASON_DEADLINE = "deadline"
REASON_SHUTDOWN = "shutdown"

CANCEL_REASONS = (
    REASON_REQUEST, REASON_SIGNAL, REASON_WALL_BUDGET, REASON_QUIET_BUDGET, REASON_MEMORY_BUDGET, REASON_DEADLINE,
    REASON_SHUTDOWN,
)  # fmt: skip
BUDGET_REASONS = (REASON_WALL_BUDGET, REASON_QUIET_BUDGET, REASON_MEMORY_BUDGET)
# What tripped a memory budget (metadata.cancelkernel.memory.kind): the cell's own budget, or the kernel's guard.
MEMORY_BUDGET = "budget"
MEMORY_GUARD = "guard"

# -- events (iopub display_data `transient`, docs/protocol.md "Events") -----------------

EVENT_MIME = "application/vnd.cancelkernel.event+json"

EVENT_INTERRUPT = "interrupt"
EVENT_RUNAWAY = "runaway"
EVENT_UNRESPONSIVE = "unresponsive"
EVENT_ABANDONED = "abandoned"
EVENT_STACK = "stack"
EVENT_MEMORY = "memory"  # after a memory trip: did the memory come back, and what holds it
EVENT_STARTED = "started"  # a cell with budgets began: its budgets, for a page that cannot ask once the GIL is held

EVENTS = (EVENT_INTERRUPT, EVENT_RUNAWAY, EVENT_UNRESPONSIVE, EVENT_ABANDONED, EVENT_STACK, EVENT_MEMORY, EVENT_STARTED)
# Events a person sees: published as a one-line note (display_data text/plain + text/html), the
# event itself in the message's `transient` (never saved into a notebook).  An interrupt is not
# one of them: it is in the reply metadata and cancel_status only.
SHOWN_EVENTS = (EVENT_RUNAWAY, EVENT_UNRESPONSIVE, EVENT_ABANDONED, EVENT_STACK, EVENT_MEMORY)
# The note's text/html is one <div class=NOTE_CLASS>: how a reader of a saved notebook tells a note
# from the cell's output.
NOTE_CLASS = "cancelkernel-note"
# The display id of the `started` event's update_display_data: no display has it, so front ends show nothing.
STARTED_DISPLAY_PREFIX = "cancelkernel-started-"

# Why a cell still runs a grace period after its interrupt (unresponsive / abandoned event "why").
UNRESPONSIVE_CAUGHT = "caught"  # its code caught the interrupt and goes on
UNRESPONSIVE_BLOCKED = "blocked"  # blocked in a call the interrupt cannot reach yet
UNRESPONSIVE_ABANDONED = "abandoned"  # worker mode: blocked in C, its exec thread was given up on and replaced
UNRESPONSIVE_WHYS = (UNRESPONSIVE_CAUGHT, UNRESPONSIVE_BLOCKED, UNRESPONSIVE_ABANDONED)

# Why the kernel took a stack (cancel_status_reply last_stack.why).
STACK_RUNAWAY = "runaway"
STACK_UNRESPONSIVE = "unresponsive"
STACK_DUMP = "dump"

# -- starting --------------------------------------------------------------------------

# The exit code of a kernel whose connection file names a port another process took between the
# launcher choosing it and the kernel binding it (jupyter_client picks free ports, then closes them):
# start it again with new ports.
EXIT_PORT_IN_USE = 75  # EX_TEMPFAIL

# -- the agent client's results and log (docs/agent.md) --------------------------------

# The statuses of a run: no other value ever appears.
Status = t.Literal["ok", "error", "interrupted", "restarted", "died"]
STATUSES: tuple[Status, ...] = t.get_args(Status)
# What the kernel's namespace is worth after the run.
State = t.Literal["intact", "suspect", "restored", "lost"]
STATES: tuple[State, ...] = t.get_args(State)
# Why the client intervened (the budget reasons are shared with the kernel).
AGENT_REASON_MANUAL = "manual"
AGENT_REASON_DIED = "died"
AGENT_REASONS = (REASON_WALL_BUDGET, REASON_QUIET_BUDGET, REASON_MEMORY_BUDGET, AGENT_REASON_MANUAL, AGENT_REASON_DIED)

# MIME type of the intervention report the agent writes into a notebook cell.
REPORT_MIME = "application/vnd.cancelkernel.agent+json"
