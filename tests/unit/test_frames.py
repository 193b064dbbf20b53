"""Unit tests: the one frame model (tracebacks, live stacks, faulthandler dumps, IPython tracebacks)."""

from __future__ import annotations

import sys
import threading

from cancelkernel import frames
from cancelkernel.frames import Frame
from cancelkernel.runtime import stacks

FAULTHANDLER = """Timeout (0:00:01)!
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f0000000002 (most recent call first):
  File "/tmp/ipykernel_42/123.py", line 3 in inner
  File "/tmp/ipykernel_42/456.py", line 1 in <module>
  File "/site-packages/IPython/core/interactiveshell.py", line 3577 in run_code
  File "/site-packages/ipykernel/kernelapp.py", line 700 in start
"""


def test_machinery_library_and_user_files() -> None:
    assert frames.is_machinery("/x/site-packages/ipykernel/kernelbase.py")
    assert frames.is_machinery("<frozen runpy>")
    assert frames.is_machinery(frames.__file__)
    assert not frames.is_user_file("/usr/lib/python3.11/threading.py")
    assert not frames.is_user_file("/venv/lib/python3.11/site-packages/numpy/core.py")
    assert frames.is_user_file("/home/me/project/model.py")
    assert frames.is_cell_file("/tmp/ipykernel_42/123.py")
    assert frames.is_user_file("/tmp/ipykernel_42/123.py")


def test_a_dump_names_the_exec_thread_from_the_cell_inwards() -> None:
    found = frames.dumped_stack(FAULTHANDLER)
    assert [(f.filename, f.lineno, f.name) for f in found] == [
        ("/tmp/ipykernel_42/456.py", 1, "<module>"),
        ("/tmp/ipykernel_42/123.py", 3, "inner"),
    ]
    by_id = frames.dumped_stack(FAULTHANDLER, thread_id=0x7F0000000001)
    assert [f.name for f in by_id] == ["_bootstrap", "wait"]
    threads = frames.parse_faulthandler(FAULTHANDLER)
    assert [(t.ident, t.current) for t in threads] == [(0x7F0000000001, False), (0x7F0000000002, True)]


def test_cell_source_fills_only_the_outermost_cell_frame() -> None:
    kept = frames.fill_cell_source(frames.dumped_stack(FAULTHANDLER), "x = 1\nsum(range(10**12))")
    assert kept[0].line == "x = 1"
    assert kept[1].line == ""
    assert all(f.user and f.label == "cell" for f in kept)
    assert frames.stopped_at(kept, readable=True) == "cell:3"
    assert frames.stopped_at(kept) == "/tmp/ipykernel_42/123.py:3"
    assert "<-- stopped here" in "\n".join(frames.format_frames(kept))
    # With the cell's execution count (the agent reads it from execute_input) the cell's frame reads as
    # every other answer does.
    named = frames.fill_cell_source(frames.dumped_stack(FAULTHANDLER), "x = 1\nsum(range(10**12))", "Cell In[4]")
    assert [f.label for f in named] == ["Cell In[4]", "cell"]  # the inner frame is a function of an earlier cell


def test_nothing_dumped() -> None:
    assert frames.dumped_stack("") == []
    assert frames.parse_faulthandler("garbage\n\n") == []


def test_parse_ipython_traceback() -> None:
    tb = [
        "\x1b[0;31m---------------------------------------------------------------------------\x1b[0m",
        "\x1b[0;31mKeyboardInterrupt\x1b[0m                         Traceback (most recent call last)",
        "Cell \x1b[0;32mIn[3]\x1b[0m, line \x1b[0;32m2\x1b[0m\n\x1b[1;32m      1\x1b[0m import time\n"
        "\x1b[0;32m----> 2\x1b[0m time\x1b[38;5;241m.\x1b[39msleep(\x1b[38;5;241m100\x1b[39m)",
        "\x1b[0;31mKeyboardInterrupt\x1b[0m: ",
    ]
    found = frames.parse_ipython_traceback(tb)
    assert found[-1].label == "Cell In[3]"
    assert found[-1].lineno == 2
    assert found[-1].line == "time.sleep(100)"


def test_round_trip_as_dicts() -> None:
    frame = Frame("/a.py", 3, "f", "x = 1", "Cell In[1]", True)
    assert Frame.from_dict(frame.as_dict()) == frame
    assert frames.from_dicts([{"filename": "/b.py", "lineno": "x"}, "junk"]) == [Frame("/b.py", 0, "")]  # type: ignore[list-item]


def test_a_deep_traceback_keeps_the_innermost_frames_and_costs_what_it_keeps() -> None:
    def recurse(n: int) -> None:
        if n == 0:
            raise ValueError("deep")
        recurse(n - 1)

    try:
        recurse(300)
    except ValueError:
        found = stacks.from_traceback(sys.exc_info()[2])
    assert len(found) == frames.MAX_FRAMES
    assert found[-1].name == "recurse"
    assert found[-1].line == 'raise ValueError("deep")'


def test_live_stack_of_another_thread() -> None:
    ready, release = threading.Event(), threading.Event()

    def parked() -> None:
        ready.set()
        release.wait(10)

    thread = threading.Thread(target=parked)
    thread.start()
    try:
        ready.wait(10)
        assert thread.ident is not None
        names = [f.name for f in stacks.thread_stack(thread.ident)]
        assert "parked" in names
        assert "wait" in stacks.blocked_at(thread.ident)
    finally:
        release.set()
        thread.join()
