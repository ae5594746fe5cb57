"""Warm windows: a task's windows stay in its process for the next task, only when committed.

Each "task" here is a new executor over the same window namespace, as the runtime makes one per
transaction. A rollback that runs in another process (another Spark Python worker) leaves this
process's warm windows of the rolled-back PREPARE behind: the replay must not take them, since
the committed token is not theirs, and must read the provider instead.
"""

from __future__ import annotations

import uuid
from typing import Any

from checkpoint import StatefulBoltExecutor
from providers import StateFactory
from statefulbolts import Fields
from statefulbolts.namespaces import TaskNamespace, window_namespace
from statefulbolts.testing import Emitted, RecordingCollector, make_context
from statefulbolts.tuples import Tuple
from statefulbolts.windowing import BaseWindowedBolt, Count, WindowedBoltExecutor
from statefulbolts.windowing._executor import _WARM

VALUE = Fields("value")


class Triples(BaseWindowedBolt):
    """Emits the ids of each tumbling window of three tuples."""

    def execute(self, window: Any) -> None:
        self.collector.emit([[t.get_value(0) for t in window.get()]])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("ids"))


class Rig:
    """One windowed task's namespace, and a new task over it per transaction."""

    def __init__(self) -> None:
        self.name = f"warm-{uuid.uuid4().hex[:8]}"
        self.task_ns = str(TaskNamespace.of_topology(self.name, "win", 0))
        self.window_ns = window_namespace(TaskNamespace.of_topology(self.name, "win", 0))

    def transaction(self, txid: int, ids: list[int], *, commit: bool = True) -> list[Any]:
        """A new task: executes ``ids``, prepares ``txid`` (commits it); what it emitted."""
        return [e.values[0] for e in self.emits(txid, ids, commit=commit)]

    def emits(self, txid: int, ids: list[int], *, commit: bool = True) -> list[Emitted]:
        """``transaction``'s emits; input tuple ``i`` is tracked in the tree of root 1000 + i."""
        context = make_context("win", topology_name=self.name)
        executor = StatefulBoltExecutor(
            WindowedBoltExecutor(Triples().with_window(Count(3), Count(3)))
        )
        out = RecordingCollector()
        executor.prepare({}, context, out)
        windowed = executor.bolt
        assert isinstance(windowed, WindowedBoltExecutor)
        windowed.begin_transaction(1000 * txid)
        executor.initialize()
        for i in ids:
            executor.handle_tuple(Tuple([i], VALUE, "source", 1, "default", (), 1000 + i, i))
        windowed.pre_prepare(txid)
        executor.state.prepare_commit(txid)
        if commit:
            windowed.pre_commit(txid)
            executor.state.commit(txid)
        return out.emitted

    def rolled_back_elsewhere(self) -> None:
        """The rollback of the prepared transaction, run by a task in another process."""
        StateFactory.get_system_state(self.window_ns, {}).rollback()
        StateFactory.get_state(self.task_ns, {}).rollback()


def test_a_replay_after_a_rollback_run_elsewhere_reads_the_committed_windows() -> None:
    rig = Rig()
    assert rig.transaction(0, [0, 1]) == []
    # PREPARE(1) fires [0, 1, 2] and holds 3; its windows are left warm here, and then it is
    # rolled back by a task in another process: this process is not told.
    assert rig.transaction(1, [2, 3], commit=False) == [[0, 1, 2]]
    rig.rolled_back_elsewhere()
    # The replay of PREPARE(1) starts from the commit of 0: the same window, once.
    assert rig.transaction(1, [2, 3]) == [[0, 1, 2]]
    assert rig.transaction(2, [4, 5]) == [[3, 4, 5]]


def test_the_next_task_of_a_committed_transaction_takes_its_windows_warm() -> None:
    rig = Rig()
    rig.transaction(0, [0, 1])
    warm = _WARM.take(rig.window_ns)
    assert warm is not None
    assert StateFactory.get_system_state(rig.window_ns, {}).get("generation") == warm.generation
    assert sorted(warm.memory) == [0, 1]  # the tuples, not read back from the provider
    _WARM.leave(rig.window_ns, warm)
    assert rig.transaction(1, [2]) == [[0, 1, 2]]
    # A transaction without the warm entry (another process ran the last one) reads the store.
    _WARM.take(rig.window_ns)
    assert rig.transaction(2, [3, 4, 5]) == [[3, 4, 5]]


def test_a_window_emit_is_anchored_to_the_tuples_of_its_own_transaction_only() -> None:
    # 0 and 1 came in a committed transaction: durable in the window state, their trees done.
    # The window [0, 1, 2] fires in the next one: its emit joins the tree of 2 alone, whether
    # 0 and 1 come back warm from this process or from the provider.
    for warm in (True, False):
        rig = Rig()
        rig.transaction(0, [0, 1])
        if not warm:
            _WARM.take(rig.window_ns)
        [emitted] = rig.emits(1, [2])
        assert emitted.values == [[0, 1, 2]]
        assert [t.anchors for t in emitted.anchors] == [((1002, 2),)]
