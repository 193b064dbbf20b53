"""The runtime: stopping the code of one execution, knowing nothing of Jupyter.

Owns: executions (`execution`), the cancellation core (`core`), SIGINT
ownership and the GIL yield (`signals`), executors (`executors`, `worker`),
waits an interrupt can reach off the main thread (`cooperative`),
deadlines (`deadlines`), the watchdog (`watchdog`), stack dumps (`dumps`,
`stacks`), and the `Runtime` that wires them for one kernel (`runtime`).

May import: the standard library, `cancelkernel.native`, and the shared pure
modules `cancelkernel.protocol`, `cancelkernel.durations`, `cancelkernel.frames`.
Never ipykernel, IPython, jupyter_client, traitlets or zmq, and nothing of the
kernel side, the checkpoints, the agent or the command line (a test checks).
"""
