"""Lifecycles: how a kernel is started, checked, signalled, restarted and shut down.

`local` covers kernels on this machine (jupyter_client's KernelManager, or a
connection file).  A lifecycle hands the link a transport (transport/) and
never interprets messages beyond recognising a restarted kernel.
"""
