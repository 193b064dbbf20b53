"""The shapes of the tools' answers: each tool's outputSchema, and
(shapes.py builds them) the structuredContent it returns.

Every field has a default, so an error answer (`{"error": "..."}`, with
isError) fits the same schema as a success.  Defaults are written `default=`,
so mypy knows which fields a constructor may leave out.
"""

from __future__ import annotations

import typing as t

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from ..protocol import State
from ..protocol import Status as CellStatus

# What an execution's answer says: how its cell ended, or that it still runs.
Status = CellStatus | t.Literal["running"]
# A JSON number kept as given: a memory budget stays whole bytes (a float field would make 2147483648 2147483648.0).
Number = t.Annotated[int | float, WithJsonSchema({"type": "number"})]


class Output(BaseModel):
    type: t.Literal["stream", "result", "display", "error", "image", "event"] = Field(description="what the output is")
    text: str = Field(default="", description="its text (for an image: a placeholder and its text/plain)")
    start: int = Field(
        default=0, description="character offset of this text in the execution's transcript (what `since` counts)"
    )
    name: str | None = Field(default=None, description="stream name: stdout or stderr")
    mime: list[str] = Field(default_factory=list, description="the MIME types the kernel sent")
    ename: str | None = None
    evalue: str | None = None
    content_index: int | None = Field(
        default=None, description="an image: its index in the call result's content (an MCP image block)"
    )
    note: str | None = None


class Frame(BaseModel):
    where: str = Field(description='"Cell In[3]:2" or "file.py:10"')
    name: str = Field(default="", description="function")
    line: str = Field(default="", description="source line")
    file: str = ""


class Truncated(BaseModel):
    omitted_from: int
    omitted_to: int
    note: str = Field(description="which call reads what was left out")


class Restored(BaseModel):
    names: list[str] = Field(default_factory=list, description="variables brought back")
    checkpoint: str | None = Field(default=None, description="the checkpoint they came from")
    skipped: list[dict[str, t.Any]] = Field(
        default_factory=list, description="names that could not be restored, and why"
    )
    note: str | None = None


class Attempt(BaseModel):
    execution_id: str | None = None
    attempt: int = 1
    status: CellStatus | None = None
    elapsed: float = 0.0
    why: str | None = None
    stopped_at: str | None = None


class Running(BaseModel):
    elapsed: float = Field(default=0.0, description="seconds since the cell started")
    seconds_since_output: float = Field(default=0.0, description="seconds since its last output")
    where: str | None = Field(default=None, description="the line it is on now, from the kernel (our kernel only)")
    kernel_state: str | None = Field(
        default=None, description="running, cancelling, unresponsive-to-interrupt (our kernel only)"
    )
    interrupts_sent: int = 0
    outputs: int = Field(default=0, description="outputs so far")


class ExecutionModel(BaseModel):
    """One cell: running, or how it ended."""

    model_config = ConfigDict(title="Execution")  # the schema's name clients see, unchanged by the Python name

    error: str | None = Field(
        default=None, description="set (with isError) when the call itself was refused; nothing ran"
    )
    execution_id: str | None = None
    kernel_id: str | None = None
    status: Status | None = Field(default=None, description="ok | error | interrupted | restarted | died | running")
    finished: bool = False
    why: str | None = Field(default=None, description="what happened, as a sentence, and what to do next")
    elapsed: float = 0.0
    outputs: list[Output] = Field(default_factory=list)
    output_chars: int = Field(default=0, description="characters in the whole transcript so far")
    next_since: int = Field(default=0, description="pass as `since` to get_execution for output not shown yet")
    truncated: Truncated | None = None
    stopped_at: str | None = Field(default=None, description="where it stopped or hung (innermost user frame)")
    stack: list[Frame] = Field(default_factory=list, description="innermost user frames, innermost last")
    state: State | None = Field(
        default=None,
        description=(
            "intact | suspect (stopped mid-way) | restored (new kernel, checkpoint back) | lost (new kernel, empty)"
        ),
    )
    restored: Restored | None = None
    reason: str | None = Field(default=None, description="wall_budget | quiet_budget | memory_budget | manual | died")
    error_name: str | None = None
    error_value: str | None = None
    execution_count: int | None = None
    budgets: dict[str, Number | None] = Field(default_factory=dict)
    actions: list[dict[str, t.Any]] = Field(
        default_factory=list, description="each intervention: action, via, why, outcome"
    )
    attempts: list[Attempt] = Field(default_factory=list, description="a cell that ran away again: every attempt")
    running: Running | None = None
    retry_of: str | None = None
    cell_id: str | None = None
    kernel: dict[str, t.Any] = Field(default_factory=dict)
    notes: list[str] = Field(
        default_factory=list, description="what could not be had (e.g. a stock kernel has no stack of a hung cell)"
    )


class KernelExecution(BaseModel):
    """A cell running on a kernel, as the kernel says it (kernel_info_reply), whoever sent it."""

    msg_id: str
    subshell_id: str | None = Field(default=None, description="null: the main shell")
    elapsed: float = 0.0
    state: str = Field(default="running", description="running, cancelling, unresponsive-to-interrupt")


class KernelInfo(BaseModel):
    kernel_id: str
    kernel_name: str = ""
    default: bool = False
    ours: bool = False
    exec_thread: str | None = None
    pid: int | None = None
    alive: bool = False
    busy: bool = False
    started_at: float | None = None
    running_execution: str | None = None
    running: Running | None = None
    last_execution: str | None = None
    last_status: Status | None = None
    abandoned_threads: list[dict[str, t.Any]] = Field(default_factory=list)
    execution_state: str | None = Field(
        default=None,
        description="status only, while no cell of this server runs: what the kernel says of its main shell "
        "(busy: a cell another client sent runs there)",
    )
    kernel_executions: list[KernelExecution] = Field(
        default_factory=list, description="status only: every cell running on the kernel as it says (our kernel)"
    )
    notes: list[str] = Field(default_factory=list)


class Kernels(BaseModel):
    error: str | None = None
    kernels: list[KernelInfo] = Field(default_factory=list)
    message: str | None = None


class KernelAction(BaseModel):
    error: str | None = None
    kernel_id: str | None = None
    action: str | None = None
    message: str | None = Field(default=None, description="what was done, as a sentence")
    state: State | None = None
    restored: Restored | None = None
    kernel: KernelInfo | None = None


class Checkpoint(BaseModel):
    error: str | None = None
    kernel_id: str | None = None
    action: str | None = None
    name: str | None = None
    message: str | None = None
    checkpoints: list[dict[str, t.Any]] = Field(default_factory=list)
    restored: Restored | None = None


class NotebookCell(BaseModel):
    index: int
    cell_type: str
    id: str | None = None
    source: str = ""
    execution_count: int | None = None
    outputs: list[Output] = Field(default_factory=list)
    truncated: Truncated | None = None


class Notebook(BaseModel):
    error: str | None = None
    path: str | None = None
    cells: list[NotebookCell] = Field(default_factory=list)
    message: str | None = None


class CellSummary(BaseModel):
    index: int
    status: CellStatus
    elapsed: float = 0.0
    state: State | None = None
    why: str | None = None
    stopped_at: str | None = None


class NotebookRun(BaseModel):
    error: str | None = None
    path: str | None = None
    output_path: str | None = None
    status: t.Literal["ok", "failed"] | None = None
    cells: list[CellSummary] = Field(default_factory=list)
    stopped_after: int | None = Field(default=None, description="index of the cell after which the run stopped")
    message: str | None = None
    cell: ExecutionModel | None = Field(default=None, description="run_cell: the cell's full result")
