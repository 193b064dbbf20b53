"""demo_policy(): the whole policy on a few runaway cells, on our kernel and (if installed) stock ipykernel.

Called by `cancelkernel demo`; about 20 s per kernel.
"""

from __future__ import annotations

import os
import sys
import tempfile
import typing as t

from ..agent.client import AgentKernel
from ..agent.errors import AgentError, CheckpointError, RunawayCellError
from ..agent.log import read_log
from ..words import plural

CELLS: list[tuple[str, str, dict[str, float]]] = [
    ("busy Python loop", "while True:\n    pass", {"wall_budget": 1.0}),
    ("silent sleeper", "import time\nwhile True:\n    time.sleep(0.1)", {"quiet_budget": 1.0}),
    ("one C call holding the GIL", "sum(range(10**12))", {"wall_budget": 1.0}),
    (
        "interrupt swallowed",
        "import time\nwhile True:\n    try:\n        time.sleep(0.01)\n    except BaseException:\n        pass",
        {"wall_budget": 1.0},
    ),
    ("kernel process exits", "import os\nos._exit(1)", {"wall_budget": 5.0}),
]


def _kernels() -> list[str]:
    from jupyter_client.kernelspec import KernelSpecManager

    names = ["cancelkernel"]
    if "python3" in KernelSpecManager().find_kernel_specs():
        names.append("python3")
    return names


def demo_policy(kernels: list[str] | None = None, out: t.TextIO | None = None) -> int:
    """Print what the agent client does with each runaway cell, per kernel; 0 if every outcome is as expected."""
    out = out or sys.stdout
    kernels = kernels or _kernels()
    surprises = 0
    with tempfile.TemporaryDirectory(prefix="cancelkernel-demo-") as tmp:
        for name in kernels:
            log_path = os.path.join(tmp, f"{name}.jsonl")
            out.write(f"\n== kernel {name!r} ==\n")
            try:
                with AgentKernel(name, log=log_path, checkpoint="off") as ak:
                    surprises += _demo_one(ak, out)
            except AgentError as exc:
                out.write(f"  could not run the demo on {name!r}: {exc}\n")
                surprises += 1
                continue
            records = read_log(log_path) if os.path.exists(log_path) else []
            out.write(
                f"  log: {len(records)} intervention records, e.g.\n"
                f"    {_log_line(records[0]) if records else '(none)'}\n"
            )
    return 0 if surprises == 0 else 1


def _demo_one(ak: AgentKernel, out: t.TextIO) -> int:
    surprises = 0
    ak.run("state = {'rows': list(range(1000))}")
    try:
        ak.save_checkpoint()
        out.write("  checkpoint saved (state = 1000 rows)\n")
    except CheckpointError:
        out.write("  (no checkpoints on this kernel: a restart loses the state)\n")
    for title, code, budgets in CELLS:
        result = ak.run(code, **budgets)  # type: ignore[arg-type]
        out.write(
            f"  {title:<28} -> {result.status:<11} {result.elapsed:5.2f} s  state {result.state:<8} "
            f"{result.reason_text or ''}\n"
        )
        expected = {"busy Python loop": "interrupted", "silent sleeper": "interrupted", "kernel process exits": "died"}
        if title in expected and result.status != expected[title]:
            surprises += 1
    first = ak.run("while True:\n    pass", wall_budget=1.0, cell_id="demo-retry")
    out.write(f"  runaway, then a 'fixed' retry  -> first attempt {first.status}\n")
    try:
        ak.retry(first, "while True:\n    pass  # still wrong")
        out.write("  retry finished (unexpected)\n")
        surprises += 1
    except RunawayCellError as exc:
        out.write(
            f"  retry ran away again          -> RunawayCellError, {plural(len(exc.attempts), 'attempt')}, kernel "
            "restarted, no second interrupt\n"
        )
    return surprises


def _log_line(record: dict) -> str:
    return f"{record.get('action')} because {record.get('why')}: {record.get('why_text')} -> {record.get('outcome')}"
