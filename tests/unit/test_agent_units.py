"""Agent client pieces that need no kernel: detection, outputs, stacks, history, log, results, bad input."""

from __future__ import annotations

import json
import os
import threading

import pytest

from cancelkernel.agent import AgentKernel, BadInputError, CellResult, read_log
from cancelkernel.agent.budgets import check_budget
from cancelkernel.agent.checkpoints import Checkpoints
from cancelkernel.agent.history import RuntimeHistory, cell_key
from cancelkernel.agent.log import InterventionLog
from cancelkernel.agent.outputs import DisplayRegistry, OutputCollector
from cancelkernel.agent.tripwire import Tripwire
from cancelkernel.testing.clock import Clock


def test_tripwire_wall_budget_trips_once() -> None:
    clock = Clock()
    wire = Tripwire(wall_budget=2.0, clock=clock, busy=True)
    wire.start()
    clock.now += 1.9
    assert wire.check() is None
    clock.now += 0.2
    assert wire.check() == "wall_budget"
    assert wire.check() is None  # once
    assert "past its wall budget of 2 s" in wire.why("wall_budget")


def test_tripwire_quiet_budget_resets_on_output() -> None:
    clock = Clock()
    wire = Tripwire(quiet_budget=1.0, clock=clock, busy=True)
    wire.start()
    for _ in range(10):  # a chatty cell is never tripped
        clock.now += 0.9
        wire.output_seen()
        assert wire.check() is None
    clock.now += 1.1
    assert wire.check() == "quiet_budget"
    assert "printed nothing for 1.1 s" in wire.why("quiet_budget")


def test_tripwire_next_check_and_slack() -> None:
    clock = Clock()
    wire = Tripwire(wall_budget=2.0, quiet_budget=5.0, clock=clock, slack=0.5)
    wire.start()
    assert wire.next_check_in() == pytest.approx(2.5)
    clock.now += 2.2
    assert wire.check() is None


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "soon", True, [1]])
def test_bad_budgets_are_refused(bad: object) -> None:
    with pytest.raises(BadInputError, match="wall_budget"):
        check_budget("wall_budget", bad)


def test_budgets_share_the_kernel_grammar() -> None:
    assert check_budget("wall_budget", "10") == 10.0
    assert check_budget("wall_budget", "2m") == 120.0
    assert check_budget("wall_budget", 0) is None  # 0 = no budget, as in %%budget
    assert check_budget("wall_budget", None) is None


def test_auto_only_where_allowed() -> None:
    assert check_budget("wall_budget", "auto", allow_auto=True) == "auto"
    with pytest.raises(BadInputError):
        check_budget("quiet_budget", "auto")


def _msg(msg_type: str, **content: object) -> dict:
    return {"header": {"msg_type": msg_type}, "msg_type": msg_type, "content": content, "parent_header": {}}


def test_outputs_merge_streams_and_clear_with_wait() -> None:
    c = OutputCollector()
    assert c.add(_msg("stream", name="stdout", text="a"))
    c.add(_msg("stream", name="stdout", text="b"))
    c.add(_msg("stream", name="stderr", text="e"))
    assert [o["text"] for o in c.outputs] == ["ab", "e"]
    c.add(_msg("clear_output", wait=True))
    assert len(c.outputs) == 2  # cleared only when the next output arrives
    c.add(_msg("execute_result", data={"text/plain": "1"}, metadata={}, execution_count=3))
    assert c.outputs == [
        {"output_type": "execute_result", "data": {"text/plain": "1"}, "metadata": {}, "execution_count": 3}
    ]
    assert not c.add(_msg("status", execution_state="idle"))


def test_display_updates_reach_earlier_cells() -> None:
    registry = DisplayRegistry()
    first = OutputCollector(registry)
    first.add(_msg("display_data", data={"text/plain": "0%"}, metadata={}, transient={"display_id": "p"}))
    second = OutputCollector(registry)
    second.add(_msg("update_display_data", data={"text/plain": "100%"}, metadata={}, transient={"display_id": "p"}))
    assert first.outputs[0]["data"] == {"text/plain": "100%"}
    assert second.outputs == []


def test_output_cap_drops_and_says_so() -> None:
    c = OutputCollector(max_output_bytes=10)
    c.add(_msg("stream", name="stdout", text="x" * 8))
    c.add(_msg("stream", name="stdout", text="y" * 8))
    c.add(_msg("stream", name="stdout", text="z" * 8))
    text = c.outputs[0]["text"]
    assert text.startswith("x" * 8 + "yy")
    assert "dropped" in text
    assert c.dropped == 14


def test_history_auto_budget_and_persistence(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "history.json")
    h = RuntimeHistory(path, floor=2.0, factor=3.0, default=30.0)
    key = cell_key("x = 1", None)
    assert h.auto_budget(key) == 30.0
    h.record(key, 0.1, "ok")
    assert h.auto_budget(key) == 2.0  # the floor
    h.record(key, 5.0, "ok")
    h.record(key, 50.0, "interrupted")  # failures do not raise the budget
    assert h.auto_budget(key) == 15.0
    again = RuntimeHistory(path, floor=2.0, factor=3.0, default=30.0)
    assert again.auto_budget(key) == 15.0
    with open(path) as f:
        assert json.load(f)["version"] == 1


def test_history_refuses_a_foreign_file(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "h.json")
    with open(path, "w") as f:
        f.write("[1, 2]")
    with pytest.raises(BadInputError, match="not a cancelkernel runtime history"):
        RuntimeHistory(path)


def test_cell_key_prefers_the_id() -> None:
    assert cell_key("a", "c1") == cell_key("b", "c1") == "id:c1"
    assert cell_key("a", None) != cell_key("b", None)


def test_log_appends_json_lines(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "agent.jsonl")
    log = InterventionLog(path)
    log.write({"action": "interrupt", "why": "wall_budget"})
    log.write({"action": "restart", "why": "died"})
    records = read_log(path)
    assert [r["action"] for r in records] == ["interrupt", "restart"]
    assert all("time" in r for r in records)


def test_log_in_a_missing_directory_is_refused(tmp_path: object) -> None:
    with pytest.raises(BadInputError, match="does not exist"):
        InterventionLog(os.path.join(str(tmp_path), "nope", "agent.jsonl"))


def test_cell_result_is_plain_json() -> None:
    r = CellResult(
        status="interrupted",
        source="while True: pass",
        outputs=[{"output_type": "stream", "name": "stdout", "text": "hi\n"}],
        reason="wall_budget",
        reason_text="the cell ran past its budget",
        state="suspect",
    )
    data = json.loads(r.to_json())
    assert data["status"] == "interrupted"
    assert data["outputs"][0]["text"] == "hi\n"
    assert CellResult.from_dict(data) == r
    assert r.text == "hi\n"
    assert "interrupted" in r.summary()


class _FakeLink:
    kernel_name = "fake"
    saved = None  # no checkpoint saved before

    def __init__(self, features: list[str], reply: dict | None) -> None:
        from cancelkernel.agent.link import KernelInfo

        self.info = KernelInfo(ours=True, features=features)
        self.reply = reply
        self.sent: list[tuple[str, dict]] = []

    def shell_request(self, msg_type: str, content: dict, *, timeout: float, reply_type: str) -> dict | None:
        self.sent.append((msg_type, content))
        return {"content": self.reply} if self.reply is not None else None


def test_checkpoint_restore_reply_is_read() -> None:
    reply = {
        "status": "ok",
        "action": "restore",
        "name": "default",
        "restored": ["a", "b"],
        "skipped": [{"name": "lock", "reason": "unpicklable"}],
    }
    link = _FakeLink(["checkpoint"], reply)
    cp = Checkpoints(link)  # type: ignore[arg-type]
    restored = cp.restore_latest()
    assert link.sent == [("checkpoint_request", {"action": "restore"})]
    assert (restored.state, restored.names, restored.checkpoint) == ("restored", ["a", "b"], "default")
    assert restored.skipped[0]["reason"] == "unpicklable"


def test_checkpoint_save_reply_has_the_names_under_saved_names() -> None:
    today = {
        "status": "ok",
        "action": "save",
        "name": "default",
        "saved": 1700000000.0,
        "names": 2,
        "saved_names": ["a", "b"],
    }
    # Our kernels before `saved` was a time
    before = {"status": "ok", "action": "save", "name": "default", "saved": ["a", "b"]}
    assert Checkpoints(_FakeLink(["checkpoint"], today)).save() == today  # type: ignore[arg-type]
    moved = Checkpoints(_FakeLink(["checkpoint"], before)).save()  # type: ignore[arg-type]
    assert moved == {"status": "ok", "action": "save", "name": "default", "saved_names": ["a", "b"], "names": 2}


def test_checkpoint_absent_or_failing_means_lost() -> None:
    assert Checkpoints(_FakeLink([], None)).restore_latest().state == "lost"  # type: ignore[arg-type]
    failing = _FakeLink(["checkpoint"], {"status": "error", "ename": "CheckpointError", "evalue": "no checkpoint"})
    restored = Checkpoints(failing).restore_latest()  # type: ignore[arg-type]
    assert restored.state == "lost"
    assert "no checkpoint" in (restored.note or "")


# -- bad input: a clear error, nothing started, nothing written --


def test_bad_constructor_arguments_start_nothing(tmp_path: object) -> None:
    with pytest.raises(BadInputError, match="wall_budget"):
        AgentKernel(wall_budget=-1)
    with pytest.raises(BadInputError, match="quiet_budget"):
        AgentKernel(quiet_budget="soon")
    with pytest.raises(BadInputError, match="checkpoint"):
        AgentKernel(checkpoint="always")
    missing = os.path.join(str(tmp_path), "kernel-missing.json")
    with pytest.raises(BadInputError, match="does not exist"):
        AgentKernel(connection_file=missing)
    assert os.listdir(str(tmp_path)) == []


def test_run_refuses_non_string_code_and_bad_budgets() -> None:
    ak = AgentKernel()  # not started: the checks come first
    with pytest.raises(BadInputError, match="code must be a str"):
        ak.run(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ak.run(None)  # type: ignore[arg-type]
    with pytest.raises(BadInputError, match="wall_budget"):
        ak.run("1", wall_budget=-5)
    with pytest.raises(BadInputError, match="not started"):
        ak.run("1")
    assert ak.link.lifecycle.km is None


def test_cli_invalid_notebook_writes_nothing(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from cancelkernel.cli.agent_commands import run_main

    bad = os.path.join(str(tmp_path), "bad.ipynb")
    with open(bad, "w") as f:
        f.write('{"cells": 3}')
    assert run_main([bad]) == 2
    assert "not a valid Jupyter notebook" in capsys.readouterr().err
    assert os.listdir(str(tmp_path)) == ["bad.ipynb"]
    assert run_main([os.path.join(str(tmp_path), "missing.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_bad_budget_tag_is_refused_before_starting(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import nbformat

    from cancelkernel.cli.agent_commands import run_main

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1", metadata={"tags": ["wall-budget=-3"]})]
    path = os.path.join(str(tmp_path), "n.ipynb")
    nbformat.write(nb, path)
    assert run_main([path]) == 2
    assert "cell 0 tag 'wall-budget=-3'" in capsys.readouterr().err
    assert os.listdir(str(tmp_path)) == ["n.ipynb"]


def test_cli_exec_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from cancelkernel.cli.agent_commands import exec_main

    assert exec_main(["-c", "1", "--wall-budget", "-1"]) == 2
    assert "not a duration" in capsys.readouterr().err
    assert exec_main([]) == 2
    assert exec_main(["/nonexistent/file.py"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_kernel_info_says_whether_a_cell_runs_on_the_main_shell() -> None:
    from cancelkernel.agent.link import KernelInfo

    def ours(state: str, executions: list[dict]) -> KernelInfo:
        ext = {"version": "1.0", "features": [], "executions": executions}
        return KernelInfo.from_reply(
            {"supported_features": ["cancelkernel"], "cancelkernel": ext, "execution_state": state}
        )

    main = {"msg_id": "m1", "subshell_id": None, "elapsed": 12.34, "state": "running"}
    sub = {"msg_id": "s1", "subshell_id": "x", "elapsed": 1.0, "state": "cancelling"}
    assert ours("busy", [main, sub]).busy
    assert ours("busy", [main]).running_text() == "m1 (12.3 s, running)"
    assert not ours("idle", [sub]).busy  # a subshell's cell does not hold the main shell
    assert not ours("busy", []).busy  # between a cell's reply and its idle: nothing to wait behind
    assert KernelInfo.from_reply({"execution_state": "busy"}).busy  # another kernel: its own word
    assert not KernelInfo.from_reply({"execution_state": "idle"}).busy
    assert not KernelInfo.from_reply({}).busy
    assert KernelInfo.from_reply({}).execution_state is None


def test_a_submission_calls_back_once_when_done_and_at_once_after() -> None:
    from cancelkernel.agent.submission import Submission

    release, calls = threading.Event(), []
    sub = Submission(lambda watch: CellResult(status="ok" if release.wait(30) else "error", source="1"), lambda: None)
    sub.when_done(lambda: calls.append("before"))
    assert calls == []
    assert not sub.done
    release.set()
    assert sub.wait(30)
    assert calls == ["before"]  # called on the cell's thread before wait() returned
    sub.when_done(lambda: calls.append("after"))
    assert calls == ["before", "after"]


def test_a_failing_done_callback_does_not_keep_the_others_waiting() -> None:
    from cancelkernel.agent.submission import Submission

    release, calls = threading.Event(), []
    sub = Submission(lambda watch: CellResult(status="ok" if release.wait(30) else "error", source="1"), lambda: None)
    sub.when_done(lambda: 1 / 0)
    sub.when_done(lambda: calls.append("second"))
    release.set()
    assert sub.wait(30)
    assert sub.result(0).status == "ok"
    assert calls == ["second"]


def test_websocket_header_dates_are_jupyter_clients() -> None:
    import warnings

    from jupyter_client.session import Session, extract_dates

    from cancelkernel.agent.transport.websocket import _with_dates

    session = Session(key=b"")
    msg = session.msg("status", {}, parent=session.msg("execute_request", {})["header"])
    headers = [
        session.unpack(session.pack(msg["header"])),
        session.unpack(session.pack(msg["parent_header"])),
        {},
        {"date": "2026-12-01T10:00:00+02:00", "nested": {"d": "2026-12-01T10:00:00Z"}, "dates": ["2026-12-01T10:00Z"]},
        {"msg_id": "2026-12-01T10:00:00Z-like", "x": "2026-12-01Tnot a date", "n": 3, "none": None},
        {"naive": "2026-12-01T10:00:00.5"},
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a naive date is read as local time, with a DeprecationWarning
        for header in headers:
            assert _with_dates(header) == extract_dates(header)
            assert [type(v) for v in _with_dates(header).values()] == [type(v) for v in extract_dates(header).values()]
