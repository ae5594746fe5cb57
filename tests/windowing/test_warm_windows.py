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
    """Emits the ids of each tumbling window; keeps the window's tuples in ``seen``."""

    def __init__(self, seen: list[Tuple]) -> None:
        self.seen = seen

    def execute(self, window: Any) -> None:
        self.seen[:] = window.get()
        self.collector.emit([[t.get_value(0) for t in window.get()]])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("ids"))


class Rig:
    """One windowed task's namespace, and a new task over it per transaction."""

    def __init__(self) -> None:
        self.name = f"warm-{uuid.uuid4().hex[:8]}"
        self.task_ns = str(TaskNamespace.of_topology(self.name, "win", 0))
        self.window_ns = window_namespace(TaskNamespace.of_topology(self.name, "win", 0))
        self.size = 3  # tuples per tumbling window
        self.seen: list[Tuple] = []  # the tuples of the last window fired

    def transaction(self, txid: int, ids: list[int], *, commit: bool = True) -> list[Any]:
        """A new task: executes ``ids``, prepares ``txid`` (commits it); what it emitted."""
        return [e.values[0] for e in self.emits(txid, ids, commit=commit)]

    def emits(self, txid: int, ids: list[int], *, commit: bool = True) -> list[Emitted]:
        """``transaction``'s emits; input tuple ``i`` is tracked in the tree of root 1000 + i."""
        context = make_context("win", topology_name=self.name)
        executor = StatefulBoltExecutor(
            WindowedBoltExecutor(Triples(self.seen).with_window(Count(self.size), Count(self.size)))
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


def test_an_older_committed_generations_tuples_are_reused_and_an_uncommitted_ones_never() -> None:
    rig = Rig()
    rig.size = 5
    rig.transaction(0, [0, 1])
    older = _WARM.take(rig.window_ns)  # this process ran 0; another one runs 1
    assert older is not None
    rig.transaction(1, [2])  # committed elsewhere: not the window of 5 yet
    _WARM.take(rig.window_ns)
    _WARM.leave(rig.window_ns, older)
    # The committed token is 1's, not 0's, so the windows come from the provider; 0 is in the
    # committed lineage, so the tuples 0 and 1 come from the warm entry, the same objects.
    assert rig.transaction(2, [3, 4]) == [[0, 1, 2, 3, 4]]
    assert rig.seen[0] is older.memory[0] and rig.seen[1] is older.memory[1]


def test_the_tuples_of_a_rolled_back_attempt_are_not_taken_for_the_committed_ones() -> None:
    rig = Rig()
    rig.transaction(0, [0, 1])
    # Attempt A of 1 runs here (ids 2 and 3 are the values 2 and 3) and is rolled back
    # elsewhere; attempt B, elsewhere, gives ids 2 and 3 to other values, and commits.
    assert rig.transaction(1, [2, 3], commit=False) == [[0, 1, 2]]
    rig.rolled_back_elsewhere()
    attempt_a = _WARM.take(rig.window_ns)
    assert attempt_a is not None and attempt_a.memory[3].get_value(0) == 3
    assert rig.transaction(1, [7, 8]) == [[0, 1, 7]]
    _WARM.take(rig.window_ns)
    _WARM.leave(rig.window_ns, attempt_a)
    # Id 3 is held, the value 8: attempt A's token is not in the lineage, its tuples unused.
    assert rig.transaction(2, [9, 10]) == [[8, 9, 10]]
