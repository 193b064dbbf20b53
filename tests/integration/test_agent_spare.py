"""The warm spare kernel: a restart swaps it in (state restored from the shared checkpoint directory), it is replaced
when it dies while idle, a spare that cannot start means a cold restart with a note, and no process is left behind."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import pytest
from helpers import agent

from cancelkernel.agent import read_log
from cancelkernel.testing import process_exited, spare_pid, wait_until

pytestmark = pytest.mark.timeout(120)

WEDGE = "sum(range(10**12))"  # one C call holding the GIL: only a restart stops it


@pytest.mark.parametrize("name", ["cancelkernel", "cancelkernel-worker"])
def test_a_wedged_kernel_is_replaced_by_the_spare_with_its_state(name: str, tmp_path: Any) -> None:
    log = os.path.join(str(tmp_path), "agent.jsonl")
    with agent(name, checkpoint="before-risky", log=log, runtime_dir=tmp_path) as ak:
        assert ak.run("import json as js\ndata = bytes(2**20)\ntotal = 7").status == "ok"
        spare = spare_pid(ak, wait=30)
        assert spare is not None
        assert spare != ak.pid
        old = ak.pid
        r = ak.run(WEDGE, wall_budget=0.5)
        assert (r.status, r.state) == ("restarted", "restored"), r.summary()
        assert ak.pid == spare
        assert old is None or process_exited(old)
        assert r.timings["spare"] is True
        assert r.notes == []
        steps = [r.timings[k] for k in ("stack_taken", "old_kernel_gone", "new_kernel_ready", "restored")]
        assert steps == sorted(steps), r.timings  # each step after the one before, all from the decision
        assert ak.run("print(total, len(data), js.dumps(1))").text == f"7 {2**20} 1\n"
        assert spare_pid(ak, wait=30) not in (None, spare)  # a new spare after the next cell
    restart = next(rec for rec in read_log(log) if rec["action"] == "restart")
    assert restart["timings"]["spare"] is True


def test_a_spare_that_died_while_idle_is_replaced_not_used(tmp_path: Any) -> None:
    with agent("cancelkernel", runtime_dir=tmp_path) as ak:
        ak.run("x = 1")
        dead = spare_pid(ak, wait=30)
        assert dead is not None
        os.kill(dead, signal.SIGKILL)
        assert process_exited(dead)
        ak.run("x = 2")  # between cells the dead spare is noticed and replaced
        fresh = spare_pid(ak, wait=30)
        assert fresh not in (None, dead)
        r = ak.run(WEDGE, wall_budget=0.5)
        assert r.status == "restarted"
        assert r.timings["spare"] is True
        assert ak.pid == fresh


def test_without_a_spare_the_restart_is_cold(tmp_path: Any) -> None:
    with agent("cancelkernel", spare=False, runtime_dir=tmp_path) as ak:
        ak.run("x = 1")
        assert spare_pid(ak) is None
        r = ak.run(WEDGE, wall_budget=0.5)
        assert r.status == "restarted"
        assert r.timings["spare"] is False
        assert r.notes == []  # turned off on purpose: nothing to explain


def test_a_spare_that_cannot_start_falls_back_to_a_cold_restart(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernelspec whose second start fails (the spare) and third succeeds (the cold restart): a real failed launch.
    count = tmp_path / "starts"
    launcher = (
        "import os, sys\n"
        f"path = {str(count)!r}\n"
        "n = int(open(path).read()) + 1 if os.path.exists(path) else 1\n"
        # Replaced whole, never truncated: the next warm spare starts while the test reads the count.
        "with open(f'{path}.{os.getpid()}', 'w') as f:\n"
        "    f.write(str(n))\n"
        "os.replace(f'{path}.{os.getpid()}', path)\n"
        "if n == 2:\n"
        "    sys.exit('this start fails on purpose')\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'ipykernel_launcher', *sys.argv[1:]])\n"
    )
    spec = {
        "argv": [sys.executable, "-c", launcher, "-f", "{connection_file}"],
        "display_name": "flaky",
        "language": "python",
    }
    specs = tmp_path / "share" / "jupyter" / "kernels" / "flaky"
    specs.mkdir(parents=True)
    (specs / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv(
        "JUPYTER_PATH",
        os.pathsep.join(filter(None, [str(tmp_path / "share" / "jupyter"), os.environ.get("JUPYTER_PATH")])),
    )
    with agent("flaky", runtime_dir=tmp_path) as ak:
        ak.run("x = 1")
        spare = ak.link.lifecycle.spare
        wait_until(lambda: spare is None or spare._done.is_set(), 30)  # the spare's start has ended (in failure)
        r = ak.run(WEDGE, wall_budget=0.5)
        assert r.status == "restarted", r.summary()
        assert r.timings["spare"] is False, r.summary()
        assert "could not be used" in r.notes[0], r.notes
        assert ak.run("print(1)").text == "1\n"
        assert json.loads(count.read_text()) >= 3


def test_the_spare_imports_the_checkpoints_modules_before_it_is_needed(tmp_path: Any) -> None:
    (tmp_path / "ck_spare_mod.py").write_text("class Thing:\n    pass\n")
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    with agent("cancelkernel", runtime_dir=tmp_path, env=env) as ak:
        assert ak.run("from ck_spare_mod import Thing\nthing = Thing()").status == "ok"
        ak.save_checkpoint()
        spare_pid(ak, wait=30)
        client = ak.link.lifecycle.spare.client
        probe = "'ck_spare_mod' in __import__('sys').modules"

        # The prepare request is answered in the background; ask the idle spare without touching its namespace
        def imported() -> bool:
            reply = client.execute_interactive("", silent=True, user_expressions={"m": probe}, timeout=30)
            return bool(reply["content"]["user_expressions"]["m"]["data"]["text/plain"] == "True")

        assert wait_until(imported, 30)
        r = ak.run(WEDGE, wall_budget=0.5)
        assert (r.status, r.state) == ("restarted", "restored")
        assert "thing" in r.restored


def test_the_spare_faults_in_memory_for_the_checkpoints_bytearray_and_the_restore_fills_it(tmp_path: Any) -> None:
    size = 64 << 20
    with agent("cancelkernel", runtime_dir=tmp_path) as ak:
        setup = f"import os, hashlib\nblob = bytearray(os.urandom({size}))\ndigest = hashlib.sha256(blob).hexdigest()"
        assert ak.run(setup).status == "ok"
        ak.save_checkpoint()
        spare = spare_pid(ak, wait=30)
        assert spare is not None
        client = ak.link.lifecycle.spare.client
        prepared = 0
        # The spare answers each prepare request; nobody else reads its shell channel while it waits.
        while prepared < size:
            reply = client.get_shell_msg(timeout=60)
            if reply["msg_type"] == "checkpoint_reply":
                assert reply["content"]["status"] == "ok", reply["content"]
                prepared = reply["content"].get("prepared", 0)
        assert prepared == size
        with open(f"/proc/{spare}/statm") as f:  # held by the spare, counted as its memory
            assert int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >= size
        r = ak.run(WEDGE, wall_budget=0.5)
        assert (r.status, r.state) == ("restarted", "restored"), r.summary()
        assert "blob" in r.restored, r.summary()
        assert ak.pid == spare
        assert r.timings["spare"] is True
        check = ak.run("print(type(blob).__name__, len(blob), hashlib.sha256(blob).hexdigest() == digest)")
        assert check.text == f"bytearray {size} True\n"
