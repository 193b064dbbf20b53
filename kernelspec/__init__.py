"""The kernelspec template (kernel.json) and logos that `cancelkernel install` copies."""
