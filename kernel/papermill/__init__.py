"""A papermill engine that runs notebooks under the agent policy.

    papermill in.ipynb out.ipynb -k cancelkernel --engine cancelkernel --execution-timeout 600

Registered under papermill's entry point group `papermill.engine` as
`cancelkernel`.  Each cell gets the agent client's budgets (papermill's
--execution-timeout as the wall budget, a cell's tags and metadata, a
first-line %%budget), one targeted interrupt, a restart with its checkpoint
restored when the interrupt cannot work, and the intervention report in the
cell; papermill's own bookkeeping (cell metadata, saves, progress bar,
--log-output) and error rules are kept.  It also runs stock kernels (`-k python3`).

Owns: the engine (`engine`: papermill's keyword arguments to the agent's
options) and papermill's side of each cell (`cells`: its bookkeeping, output
echo and error rules, as hooks of the agent's notebook runner).  May import:
papermill, nbformat, the agent client (`cancelkernel.agent`) and the shared
pure modules.  Never the kernel side, the runtime, the native flag, the
checkpoints package or the command line (a test checks).
"""
