"""What the Enterprise Gateway tests share: the kernelspec names, a site (EG and where its kernels run), checks."""

from __future__ import annotations

import typing as t
from dataclasses import dataclass

from cancelkernel.testing import wait_until
from cancelkernel.testing.enterprise_gateway import Gateway
from cancelkernel.testing.remote_host import RemoteHost

# The kernelspecs each gateway has: docs/enterprise-gateway/distributed/kernel.json in its two interrupt modes.
MESSAGE, SIGNAL = "cancelkernel_eg", "cancelkernel_eg_signal"


@dataclass
class Site:
    """A running EG, and how to find (this machine's pids of) the processes that mention a kernel id."""

    name: str
    gateway: Gateway
    processes: t.Callable[[str], list[int]]
    host: RemoteHost | None = None  # the second host, when the kernels run there


def failed(found: t.Iterable[t.Any]) -> str:
    """The check_gateway findings that FAILED, one line each ('' when none did)."""
    return "\n".join(f.line() for f in found if f.outcome == "FAILED")


def assert_no_kernel_left(site: Site, kernel_ids: t.Iterable[str]) -> None:
    """EG lists none of `kernel_ids`, and no process whose command line names one of them still runs."""
    ids = set(kernel_ids)
    assert ids, "no kernel was started"
    listed = wait_until(lambda: not ids & set(site.gateway.kernel_ids()), 30)
    assert listed, f"EG still lists {ids & set(site.gateway.kernel_ids())}\n{site.gateway.log_tail()}"
    gone = wait_until(lambda: not any(site.processes(k) for k in ids), 30)
    assert gone, f"kernel processes still run: {[(k, site.processes(k)) for k in sorted(ids)]}"
