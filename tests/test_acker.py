"""RotatingMap (STORM-PROTOCOL 5.1), deterministic ids, and the XOR ledger over a tuple tree."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest

from statefulbolts import Bolt, Fields, Spout, TopologyBuilder, Tuple
from statefulbolts.acker import IdSequence, RotatingMap, id_base, mix64

# ----------------------------------------------------------------- RotatingMap


@pytest.mark.parametrize("n", [1, 0, -3])
def test_fewer_than_two_buckets_is_an_error(n):
    with pytest.raises(ValueError, match=f"num_buckets must be >= 2, got {n}"):
        RotatingMap(n)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_entry_expires_on_the_nth_rotate_after_its_last_put(n):
    expired: list[tuple[str, int]] = []
    m: RotatingMap[str, int] = RotatingMap(n, lambda k, v: expired.append((k, v)))
    m.put("a", 1)
    for _ in range(n - 1):
        assert m.rotate() == {}
        assert "a" in m and m.get("a") == 1
    assert expired == []
    assert m.rotate() == {"a": 1}
    assert expired == [("a", 1)]
    assert "a" not in m and len(m) == 0


def test_default_is_three_buckets():
    m: RotatingMap[str, int] = RotatingMap()
    m.put("a", 1)
    assert [bool(m.rotate()) for _ in range(3)] == [False, False, True]


def test_put_resets_the_age_and_keeps_one_copy():
    expired: list[str] = []
    m: RotatingMap[str, int] = RotatingMap(2, lambda k, v: expired.append(k))
    m.put("a", 1)
    m.rotate()
    m.put("a", 2)  # moves to the newest bucket
    assert len(m) == 1
    assert m.rotate() == {}
    assert m.get("a") == 2
    assert m.rotate() == {"a": 2}
    assert expired == ["a"]


def test_get_remove_contains_len_and_keys():
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("old", 1)
    m.rotate()
    m.put("new", 2)
    assert list(m.keys()) == ["new", "old"]
    assert len(m) == 2
    assert m.get("old") == 1
    assert m.get("missing") is None
    assert m.get("missing", 7) == 7
    assert m.remove("old") == 1
    assert m.remove("old") is None
    assert "old" not in m and "new" in m
    assert len(m) == 1


def test_rotate_without_callback_returns_the_dropped_entries():
    m: RotatingMap[int, str] = RotatingMap(2)
    m.put(1, "x")
    m.put(2, "y")
    m.rotate()
    m.put(3, "z")
    assert m.rotate() == {1: "x", 2: "y"}
    assert dict.fromkeys(m.keys()) == {3: None}


# ----------------------------------------------------------------- ids


def test_id_sequence_is_deterministic():
    a, b = IdSequence(12345), IdSequence(12345)
    assert [a.next() for _ in range(50)] == [b.next() for _ in range(50)]


def test_id_sequence_ids_are_distinct_non_zero_63_bit():
    seq = IdSequence(987654321)
    ids = [seq.next() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(0 < i < 2**63 for i in ids)
    assert max(ids) > 2**62  # the whole range is used


@pytest.mark.parametrize("base", [-1, 2**64 - 1])
def test_id_sequence_never_yields_zero(base):
    # base + 1 is 0 modulo 2**64, and mix64(0) == 0: the sequence must still not yield 0.
    assert mix64(0) == 0
    assert IdSequence(base).next() == 1


def test_id_base_differs_per_transaction_component_and_task_and_repeats():
    bases = {id_base(t, c, k) for t in range(3) for c in range(3) for k in range(3)}
    assert len(bases) == 27
    assert id_base(5, 1, 2) == id_base(5, 1, 2)
    assert IdSequence(id_base(5, 1, 2)).next() != IdSequence(id_base(6, 1, 2)).next()


def test_mix64_is_a_64_bit_bijection_sample():
    outs = {mix64(i) for i in range(5000)}
    assert len(outs) == 5000
    assert all(0 <= o < 2**64 for o in outs)


# ----------------------------------------------------------------- the XOR ledger


def test_runtime_task_and_plan_import_without_pyspark():
    code = (
        "import sys\n"
        "import statefulbolts.runtime._task, statefulbolts.runtime._plan\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


class Sentences(Spout):
    def next_tuple(self) -> None:
        """Never called."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("sentence"))


class Words(Bolt):
    def execute(self, tuple):  # noqa: A002
        """Never called: the test drives the collectors."""

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class Ledger:
    """A plain topology s -> a -> b -> c (one task each) and one TaskCollector per bolt."""

    def __init__(self, txid: int = 7) -> None:
        from statefulbolts.runtime._plan import ExecutionPlan
        from statefulbolts.runtime._task import TaskCollector

        builder = TopologyBuilder()
        builder.set_spout("s", Sentences())
        builder.set_bolt("a", Words()).shuffle_grouping("s")
        builder.set_bolt("b", Words()).shuffle_grouping("a")
        builder.set_bolt("c", Words()).shuffle_grouping("b")
        self.topology = builder.create_topology()
        self.plan = ExecutionPlan(self.topology)
        self.collectors = {
            name: TaskCollector(
                self.plan,
                self.plan.index[name],
                0,
                self.plan.level_of[self.plan.index[name]],
                txid,
                name,
            )
            for name in ("a", "b", "c")
        }
        # The spout side, as the driver does it: a root id and one edge per destination task.
        self.ids = IdSequence(id_base(txid, self.plan.index["s"], 0))

    def spout_tuple(self, sentence: str) -> tuple[int, int, Tuple]:
        root, edge = self.ids.next(), self.ids.next()
        t = Tuple(
            [sentence],
            Fields("sentence"),
            "s",
            self.topology.task_ids("s")[0],
            "default",
            ((root, edge),),
        )
        return root, edge, t

    def emit(self, bolt: str, values: list[Any], parents: Sequence[Tuple]) -> Tuple:
        """Emit through ``bolt``'s collector; return the tuple as its one consumer receives it.

        The child's anchors are rebuilt from what the emit XORed into each parent's ack value
        (one destination task, so one new edge per parent).
        """
        before = [p.ack_val for p in parents]
        self.collectors[bolt].emit(values, list(parents))
        roots: dict[int, int] = {}
        for parent, old in zip(parents, before, strict=True):
            edge = parent.ack_val ^ old
            assert edge != 0
            for root, _ in parent.anchors:
                roots[root] = roots.get(root, 0) ^ edge
        task = self.topology.task_ids(bolt)[0]
        return Tuple(values, Fields("word"), bolt, task, "default", tuple(roots.items()))

    def total(self, root: int, init: int) -> int:
        value = init
        for collector in self.collectors.values():
            value ^= collector.xor.get(root, 0)
        return value


def walk(ledger: Ledger, ack_last: bool = True) -> tuple[int, int, Tuple]:
    """s emits one sentence; a splits it in two; b joins both words into one; c acks it."""
    root, init, sentence = ledger.spout_tuple("hello world")
    w1 = ledger.emit("a", ["hello"], [sentence])
    w2 = ledger.emit("a", ["world"], [sentence])
    ledger.collectors["a"].ack(sentence)
    joined = ledger.emit("b", ["hello world"], [w1, w2])  # anchored to two parents
    ledger.collectors["b"].ack(w1)
    ledger.collectors["b"].ack(w2)
    if ack_last:
        ledger.collectors["c"].ack(joined)
    return root, init, joined


def test_acking_a_whole_tree_xors_to_zero():
    ledger = Ledger()
    root, init, _ = walk(ledger)
    assert init != 0
    assert ledger.total(root, init) == 0
    assert [c.fails for c in ledger.collectors.values()] == [[], [], []]


def test_one_unacked_tuple_leaves_exactly_its_edge_id():
    ledger = Ledger()
    root, init, joined = walk(ledger, ack_last=False)
    remaining = ledger.total(root, init)
    assert remaining != 0
    ((anchor_root, edge),) = joined.anchors
    assert (anchor_root, remaining) == (root, edge)


def test_an_unacked_middle_tuple_keeps_the_tree_open():
    ledger = Ledger()
    root, init, sentence = ledger.spout_tuple("x y")
    w1 = ledger.emit("a", ["x"], [sentence])
    ledger.emit("a", ["y"], [sentence])  # never acked downstream
    ledger.collectors["a"].ack(sentence)
    ledger.collectors["b"].ack(w1)
    assert ledger.total(root, init) != 0


def test_a_tuple_anchored_to_two_trees_completes_both():
    ledger = Ledger()
    r1, i1, s1 = ledger.spout_tuple("one")
    r2, i2, s2 = ledger.spout_tuple("two")
    both = ledger.emit("a", ["one two"], [s1, s2])
    assert {root for root, _ in both.anchors} == {r1, r2}
    ledger.collectors["a"].ack(s1)
    ledger.collectors["a"].ack(s2)
    assert ledger.total(r1, i1) != 0 and ledger.total(r2, i2) != 0
    ledger.collectors["b"].ack(both)
    assert (ledger.total(r1, i1), ledger.total(r2, i2)) == (0, 0)


def test_fail_names_every_root_of_the_tuple():
    ledger = Ledger()
    r1, _, s1 = ledger.spout_tuple("one")
    r2, _, s2 = ledger.spout_tuple("two")
    both = ledger.emit("a", ["one two"], [s1, s2])
    ledger.collectors["b"].fail(both)
    assert sorted(ledger.collectors["b"].fails) == sorted([r1, r2])


def test_a_retried_task_reproduces_the_same_ledger():
    first, second = Ledger(txid=3), Ledger(txid=3)
    walk(first, ack_last=False)
    walk(second, ack_last=False)
    assert [c.xor for c in first.collectors.values()] == [c.xor for c in second.collectors.values()]
    assert first.collectors["a"].xor  # not trivially empty
