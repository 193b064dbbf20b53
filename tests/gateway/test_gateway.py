"""cancelkernel through a real Enterprise Gateway, its kernels on this machine and on a second host.

Each test runs one group of the operator's checks (docs/enterprise-gateway/check_gateway.py) against
EG on loopback and against EG whose kernels run over SSH on a second host (a network namespace with
its own address, PIDs and host name), then checks that EG lists none of the kernels it started and
that none of their processes still runs.
"""

from __future__ import annotations

from types import ModuleType

from gateway_helpers import MESSAGE, SIGNAL, Site, assert_no_kernel_left, failed


def gateway_of(checks: ModuleType, site: Site, kernel: str = MESSAGE) -> object:
    return checks.Gateway(site.gateway.url, site.gateway.token, kernel)


def test_runaways_get_one_targeted_interrupt(checks: ModuleType, site: Site) -> None:
    gw = gateway_of(checks, site)
    found = checks.check_interrupts(gw)
    assert not failed(found), failed(found) + "\n" + site.gateway.log_tail()
    assert len(found) == 1 + len(checks.RUNAWAYS)
    assert_no_kernel_left(site, gw.started)


def test_cancel_status_names_the_running_line(checks: ModuleType, site: Site) -> None:
    gw = gateway_of(checks, site)
    found = checks.check_cancel_status(gw)
    assert found.outcome == "ok", found.line()
    assert_no_kernel_left(site, gw.started)


def test_a_wedged_cell_is_restarted_with_its_checkpoint(checks: ModuleType, site: Site) -> None:
    gw = gateway_of(checks, site)
    found = checks.check_wedged(gw)
    assert found.outcome == "ok", found.line() + "\n" + site.gateway.log_tail()
    assert_no_kernel_left(site, gw.started)


def test_notebooks_at_once_with_jobs(checks: ModuleType, site: Site) -> None:
    gw = gateway_of(checks, site)
    found = checks.check_notebooks(gw, 3)
    assert found.outcome == "ok", found.line()
    assert len(gw.started) == 3
    assert_no_kernel_left(site, gw.started)


def test_child_processes_get_the_interrupt(checks: ModuleType, site: Site) -> None:
    """Targeted: always.  EG's REST interrupt: with "message" yes (our kernel's empty interrupt_request signals
    the cell's children); with "signal" no (EG's launcher signals the kernel process only, the child runs on)."""
    said = {}
    for kernel in (MESSAGE, SIGNAL):
        gw = gateway_of(checks, site, kernel)
        targeted, rest = checks.check_children(gw)
        assert targeted.outcome == "ok", targeted.line()
        said[kernel] = rest.detail
        assert_no_kernel_left(site, gw.started)
    assert said[MESSAGE].endswith("the child got SIGINT"), said
    assert said[SIGNAL].endswith("the child did not get SIGINT and still ran (killed now)"), said


def test_checkpoints_on_the_shared_root(checks: ModuleType, site: Site, kernel_settings: dict[str, str]) -> None:
    gw = gateway_of(checks, site)
    found = checks.check_checkpoint_root(gw, kernel_settings["CANCELKERNEL_CHECKPOINT_ROOT"])
    assert not failed(found), failed(found)
    assert [f.outcome for f in found] == ["ok"] * 4, "\n".join(f.line() for f in found)
    assert_no_kernel_left(site, gw.started)


def test_where_the_kernel_runs(checks: ModuleType, site: Site) -> None:
    """On the second host: its host name, and a pid this machine does not know by that number."""
    gw = gateway_of(checks, site)
    found = checks.check_host(gw, expect_remote=site.host is not None)
    if site.host is None:
        assert found.outcome == "info", found.line()
    else:
        assert found.outcome == "ok", found.line()
        assert repr(site.host.hostname) in found.detail
        ak = gw.agent()
        try:
            here = site.processes(ak.link.kernel_id)
            assert here, "the kernel's processes are not in the second host's namespace"
            assert ak.info.pid not in here  # the pid the kernel reports is its own namespace's
        finally:
            ak.close()
    assert_no_kernel_left(site, gw.started)
