"""Events are printed one whole line per write, and the test's reader survives a bad line.

Once, on a busy machine, two threads of a driver printed two JSON events on one line; the
spark-submit test's reader thread died on it and the test reported that the driver had said
nothing. ``statefulbolts._output`` writes each line in one call under a lock, the command line
prints through it, and ``DriverProcess`` reports a line it cannot parse.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from pathlib import Path

import pytest
from standalone_cluster import DriverProcess

from statefulbolts import cli
from statefulbolts._output import print_event


class RecordingStream(io.StringIO):
    """A stream that keeps each ``write`` call, and gives up the GIL inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        time.sleep(0)  # let another thread in between two writes, were there two
        return super().write(text)


TRANSACTION = {
    "txid": 3, "action": "PREPARE", "tuples": 10, "acked": 10, "failed": 0,
    "seconds": 0.25, "ok": True, "error": None,
}  # fmt: skip


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_each_printed_line_is_one_write(monkeypatch, as_json: bool) -> None:
    stream = RecordingStream()
    monkeypatch.setattr(sys, "stdout", stream)
    cli._print_transaction(TRANSACTION, as_json)
    cli._print_done({"event": "done", "topology": "wc", "components": {}}, as_json)
    assert len(stream.writes) == 2
    assert all(w.endswith("\n") and w.count("\n") == 1 for w in stream.writes), stream.writes


def test_events_printed_from_many_threads_stay_one_per_line() -> None:
    stream = RecordingStream()

    def emit(thread: int) -> None:
        for n in range(50):
            print_event({"event": "transaction", "thread": thread, "n": n}, stream)

    threads = [threading.Thread(target=emit, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert sorted((e["thread"], e["n"]) for e in events) == [
        (t, n) for t in range(8) for n in range(50)
    ]


def test_the_driver_reader_reports_a_line_that_is_not_one_event(tmp_path: Path) -> None:
    printer = (
        "import json\n"
        "print(json.dumps({'event': 'tx'}) + json.dumps({'event': 'tx'}), flush=True)\n"
        "print(json.dumps({'event': 'done'}), flush=True)\n"
    )
    driver = DriverProcess([], tmp_path / "driver.log", command=[sys.executable, "-c", printer])
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            driver.until("done", time.monotonic() + 60)
    finally:
        driver.stop()
    assert "the driver printed a line that is not one JSON event: " in str(failed.value)
    assert '{"event": "tx"}{"event": "tx"}' in str(failed.value)
