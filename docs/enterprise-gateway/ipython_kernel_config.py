# Installed by the Dockerfile as <sys.prefix>/etc/ipython/ipython_kernel_config.py in the kernel image.
# Enterprise Gateway's launcher starts ipykernel's IPKernelApp with our kernel class (not our own app)
# and passes no command-line options, so the kernel's settings go here.
c = get_config()  # noqa: F821

# Our output streams: without them the kernel's quiet budget does not see a cell's output.
c.IPKernelApp.outstream_class = "cancelkernel.kernel.streams.CancelOutStream"

# Kernel options (what `cancelkernel install` would put on the kernel's command line), e.g.:
# c.CancelKernel.exec_thread = "worker"
# c.CancelKernel.interrupt_grace = 2.0

# Checkpoints that survive a restart: a restarted kernel is a new pod with a new connection file,
# so the default directory (named after the connection file, inside the pod) is not found again.
# KERNEL_ID stays the same across restarts; mount a volume at /checkpoints (scripts/kernel-pod.yaml.j2).
# import os
# c.CheckpointSettings.directory = "/checkpoints/" + os.environ["KERNEL_ID"]
