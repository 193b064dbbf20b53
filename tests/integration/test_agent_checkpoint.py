"""Checkpoints through the agent client: state restored after a restart (wedge or death)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from helpers import agent

from cancelkernel.agent import read_log

pytestmark = pytest.mark.timeout(120)


def test_before_risky_checkpoint_is_restored_after_a_wedge(tmp_path: Any) -> None:
    log = os.path.join(str(tmp_path), "agent.jsonl")
    with agent("cancelkernel", checkpoint="before-risky", log=log, runtime_dir=tmp_path) as ak:
        assert ak.checkpoints.available
        setup = ak.run("import json as js\ndata = bytes(10 * 2**20)\nrows = {'n': 3}\ndef double(v):\n    return 2 * v")
        assert setup.status == "ok"
        r = ak.run("sum(range(10**12))", wall_budget=0.5)
        assert (r.status, r.state) == ("restarted", "restored"), r.summary()
        assert {"data", "rows", "double", "js"} <= set(r.restored)
        assert r.checkpoint
        check = ak.run("print(len(data), rows['n'], double(21), js.dumps(1))")
        assert check.text == f"{10 * 2**20} 3 42 1\n"
    restart = [rec for rec in read_log(log) if rec["action"] == "restart"]
    assert restart
    assert "restored" in restart[0]["outcome"]
    assert "data" in restart[0]["restored"]


def test_after_ok_checkpoint_is_restored_after_death(tmp_path: Any) -> None:
    with agent("cancelkernel", checkpoint="after-ok", runtime_dir=tmp_path) as ak:
        assert ak.run("total = 7").status == "ok"
        died = ak.run("import os\nos._exit(1)")
        assert (died.status, died.state) == ("died", "restored")
        assert "total" in died.restored
        assert ak.run("print(total)").text == "7\n"


def test_explicit_save_list_restore_drop(tmp_path: Any) -> None:
    with agent("cancelkernel", runtime_dir=tmp_path) as ak:
        ak.run("a = 1")
        saved = ak.save_checkpoint("first")
        assert saved["name"] == "first"
        assert "a" in saved["saved_names"]
        ak.run("a = 2")
        restored = ak.restore_checkpoint("first")
        assert restored.state == "restored"
        assert "a" in restored.names
        assert ak.run("print(a)").text == "1\n"
        assert "first" in [c["name"] for c in ak.list_checkpoints()]
        ak.drop_checkpoint("first")
        assert "first" not in [c["name"] for c in ak.list_checkpoints()]
