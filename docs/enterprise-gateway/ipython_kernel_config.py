# cancelkernel's settings under Enterprise Gateway's launcher, which starts ipykernel's IPKernelApp with our
# kernel class (not our own app) and passes it no command-line options, so they go in this file.
# Where it goes: <sys.prefix>/etc/ipython/ipython_kernel_config.py of the Python that runs the kernel (the
# Dockerfile puts it there in the image; on remote hosts, put it there yourself), or
# $IPYTHONDIR/profile_default/ipython_kernel_config.py with IPYTHONDIR set in the kernelspec's "env"
# (tests/gateway does that).
c = get_config()  # noqa: F821

# Our output streams: without them the kernel's quiet budget does not see a cell's output.
c.IPKernelApp.outstream_class = "cancelkernel.kernel.streams.CancelOutStream"

# Checkpoints that survive a restart need nothing here: the kernel reads CANCELKERNEL_CHECKPOINT_ROOT (name it in the
# kernelspec's "env": a path every kernel host, every pod, sees, e.g. a volume in scripts/kernel-pod.yaml.j2) and keeps
# each kernel's checkpoints in <root>/<KERNEL_ID>, which stays the same across restarts while EG's launcher names
# the connection file anew at every start (CheckpointSettings.root; docs/checkpoints.md).

# Kernel options (what `cancelkernel install` would put on the kernel's command line), e.g.:
# c.CancelKernel.exec_thread = "worker"
# c.CancelKernel.interrupt_grace = 2.0
