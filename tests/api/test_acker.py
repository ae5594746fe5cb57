"""RotatingMap, deterministic ids, and XOR acking over a tuple tree."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest

from statefulbolts import Bolt, Fields, Spout, TopologyBuilder, Tuple
from statefulbolts.acker import DeliveryLedger, RotatingMap, id_base, mix64, tuple_id

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


def test_id_base_differs_per_transaction_component_and_task_and_repeats():
    bases = {id_base(t, c, k) for t in range(3) for c in range(3) for k in range(3)}
    assert len(bases) == 27
    assert id_base(5, 1, 2) == id_base(5, 1, 2)


def test_mix64_is_a_64_bit_bijection_sample():
    outs = {mix64(i) for i in range(5000)}
    assert len(outs) == 5000
    assert all(0 <= o < 2**64 for o in outs)


@pytest.mark.parametrize("number", [0, 2**64, -(2**64)])
def test_tuple_id_is_never_zero(number):
    # mix64 maps every multiple of 2**64 to 0; an id of 0 would vanish from the XOR.
    assert mix64(number) == 0
    assert tuple_id(number) == 1


def test_tuple_ids_of_consecutive_numbers_are_distinct_and_spread():
    base = id_base(3, 1, 0)
    ids = [tuple_id(base + i) for i in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert max(ids) > 2**63  # the whole 64-bit range is used


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


class Deliver:
    """What one task holds: its ``DeliveryLedger`` and the tuples it was given, by value."""

    def __init__(self, base: int) -> None:
        self.ledger = DeliveryLedger(base)
        self.tuples: dict[str, Tuple] = {}

    def give(self, *named: tuple[str, Sequence[int]]) -> None:
        """Deliver one batch: a tuple per ``(value, roots)``, numbered in order."""
        roots = [r[0] if r else 0 for _, r in named]
        more = {i: tuple(r[1:]) for i, (_, r) in enumerate(named) if len(r) > 1} or None
        first = self.ledger.deliver(roots, more)
        for i, (value, rs) in enumerate(named):
            pairs = tuple((r, first + i) for r in rs)
            self.tuples[value] = Tuple([value], Fields("word"), "split", 1, "default", pairs)

    def ack(self, *values: str) -> None:
        for value in values:
            self.ledger.ack(self.tuples[value])


def test_a_task_that_acked_everything_once_reports_nothing():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", [7]), ("b", [7]), ("c", [9]))
    task.ack("a", "b", "c")
    assert task.ledger.settle() == ({}, True)


def test_acks_held_until_a_checkpoint_may_come_in_any_order():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", [7]), ("b", [8]), ("c", [9]))
    task.give(("$cp", [99]))
    task.ack("$cp", "a", "b", "c")  # a stateful task acks the barrier before its held acks
    assert task.ledger.settle() == ({}, True)


def test_an_unacked_tuple_leaves_its_own_id_on_its_root():
    base = id_base(1, 2, 0)
    task = Deliver(base)
    task.give(("a", [7]), ("b", [7]), ("c", [9]))
    task.ack("a", "c")
    assert task.ledger.settle() == ({7: tuple_id(base + 1)}, False)


def test_a_tuple_acked_twice_does_not_stand_in_for_one_never_acked():
    base = id_base(1, 2, 0)
    task = Deliver(base)
    task.give(("a", [7]), ("b", [7]))
    task.ack("a", "a")  # two acks, as many as tuples: the fast check must not be fooled
    left, exact = task.ledger.settle()
    assert not exact
    assert left == {7: tuple_id(base) ^ tuple_id(base + 1)}
    assert left[7] != 0


def test_a_tuple_of_two_trees_keeps_both_open_until_acked():
    base = id_base(1, 2, 0)
    open_ = Deliver(base)
    open_.give(("a", [7, 9]))
    assert open_.ledger.settle() == ({7: tuple_id(base), 9: tuple_id(base)}, False)
    done = Deliver(base)
    done.give(("a", [7, 9]))
    done.ack("a")
    assert done.ledger.settle() == ({}, True)


def test_untracked_tuples_need_no_ack():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", []), ("b", []))
    assert task.ledger.settle() == ({}, False)


def test_acking_something_that_is_not_a_tuple_is_a_type_error():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", [7]))
    task.ledger.ack("a")  # the value, not the tuple
    with pytest.raises(TypeError, match="ack\\(\\) takes a Tuple"):
        task.ledger.settle()


def test_a_retried_task_reproduces_the_same_ledger():
    def attempt() -> dict[int, int]:
        task = Deliver(id_base(3, 1, 0))
        task.give(("a", [7]), ("b", [7, 9]), ("c", [9]))
        task.ack("b")
        return task.ledger.settle()[0]

    first = attempt()
    assert first  # not trivially empty
    assert attempt() == first


class Ledger:
    """A plain topology s -> a -> b -> c (one task each), run by hand through TaskCollectors.

    A tuple emitted by one bolt is delivered to the next as the runtime does it: the receiving
    task numbers the batch in its ledger and builds the tuple with that number.
    """

    def __init__(self, txid: int = 7) -> None:
        from statefulbolts.runtime._collector import TaskCollector
        from statefulbolts.runtime._plan import ExecutionPlan

        builder = TopologyBuilder()
        builder.set_spout("s", Sentences())
        builder.set_bolt("a", Words()).shuffle_grouping("s")
        builder.set_bolt("b", Words()).shuffle_grouping("a")
        builder.set_bolt("c", Words()).shuffle_grouping("b")
        self.topology = builder.create_topology()
        self.plan = ExecutionPlan(self.topology)
        self.collectors = {
            name: TaskCollector(self.plan, self.plan.index[name], 0, txid, name)
            for name in ("a", "b", "c")
        }
        self._next_root = 1000 + txid

    def spout_tuple(self, sentence: str) -> tuple[int, Tuple]:
        """A spout tuple delivered to ``a``: a fresh root id, numbered by ``a``'s ledger."""
        self._next_root += 1
        root = self._next_root
        number = self.collectors["a"].ledger.deliver([root])
        t = Tuple(
            [sentence],
            Fields("sentence"),
            "s",
            self.topology.task_ids("s")[0],
            "default",
            ((root, number),),
        )
        return root, t

    def emit(self, bolt: str, values: list[Any], parents: Sequence[Tuple]) -> Tuple:
        """Emit through ``bolt``'s collector; return the tuple as its one consumer receives it."""
        sender = self.collectors[bolt]
        sender.emit(values, list(parents))
        ((batch_key, (vals, roots, more)),) = sender.batches.items()
        del sender.batches[batch_key]
        receiver = self.collectors[{"a": "b", "b": "c"}[bolt]]
        number = receiver.ledger.deliver(roots, more)
        anchors = [(roots[0], number)] if roots[0] else []
        anchors += [(r, number) for r in (more or {}).get(0, ())]
        task = self.topology.task_ids(bolt)[0]
        return Tuple(values, Fields("word"), bolt, task, "default", tuple(anchors))

    def total(self, root: int) -> int:
        value = 0
        for collector in self.collectors.values():
            value ^= collector.ledger.settle()[0].get(root, 0)
        return value


def walk(ledger: Ledger, ack_last: bool = True) -> tuple[int, Tuple]:
    """s emits one sentence; a splits it in two; b joins both words into one; c acks it."""
    root, sentence = ledger.spout_tuple("hello world")
    w1 = ledger.emit("a", ["hello"], [sentence])
    w2 = ledger.emit("a", ["world"], [sentence])
    ledger.collectors["a"].ack(sentence)
    joined = ledger.emit("b", ["hello world"], [w1, w2])  # anchored to two parents
    ledger.collectors["b"].ack(w1)
    ledger.collectors["b"].ack(w2)
    if ack_last:
        ledger.collectors["c"].ack(joined)
    return root, joined


def test_acking_a_whole_tree_leaves_nothing_in_any_task():
    ledger = Ledger()
    root, _ = walk(ledger)
    assert [c.ledger.settle() for c in ledger.collectors.values()] == [({}, True)] * 3
    assert ledger.total(root) == 0
    assert [c.fails for c in ledger.collectors.values()] == [[], [], []]


def test_one_unacked_tuple_leaves_exactly_its_id():
    ledger = Ledger()
    root, joined = walk(ledger, ack_last=False)
    ((anchor_root, number),) = joined.anchors
    assert (anchor_root, number) == (root, 0)  # the first tuple c was given
    c_id = tuple_id(id_base(7, ledger.plan.index["c"], 0) + number)
    assert ledger.total(root) == c_id
    assert ledger.collectors["c"].ledger.settle() == ({root: c_id}, False)


def test_an_unacked_middle_tuple_keeps_the_tree_open():
    ledger = Ledger()
    root, sentence = ledger.spout_tuple("x y")
    w1 = ledger.emit("a", ["x"], [sentence])
    ledger.emit("a", ["y"], [sentence])  # never acked downstream
    ledger.collectors["a"].ack(sentence)
    ledger.collectors["b"].ack(w1)
    assert ledger.total(root) != 0


def test_a_tuple_anchored_to_two_trees_completes_both():
    ledger = Ledger()
    r1, s1 = ledger.spout_tuple("one")
    r2, s2 = ledger.spout_tuple("two")
    both = ledger.emit("a", ["one two"], [s1, s2])
    assert {root for root, _ in both.anchors} == {r1, r2}
    ledger.collectors["a"].ack(s1)
    ledger.collectors["a"].ack(s2)
    assert ledger.total(r1) != 0 and ledger.total(r2) != 0
    ledger.collectors["b"].ack(both)
    assert (ledger.total(r1), ledger.total(r2)) == (0, 0)


def test_an_anchor_on_two_trees_passes_both_to_its_child():
    ledger = Ledger()
    r1, s1 = ledger.spout_tuple("one")
    r2, s2 = ledger.spout_tuple("two")
    both = ledger.emit("a", ["one two"], [s1, s2])
    child = ledger.emit("b", ["child"], [both])  # one anchor, itself on two trees
    assert [root for root, _ in child.anchors] == [r1, r2]
    ledger.collectors["a"].ack(s1)
    ledger.collectors["a"].ack(s2)
    ledger.collectors["b"].ack(both)
    assert ledger.total(r1) != 0 and ledger.total(r2) != 0
    ledger.collectors["c"].ack(child)
    assert (ledger.total(r1), ledger.total(r2)) == (0, 0)


def test_fail_names_every_root_of_the_tuple():
    ledger = Ledger()
    r1, s1 = ledger.spout_tuple("one")
    r2, s2 = ledger.spout_tuple("two")
    both = ledger.emit("a", ["one two"], [s1, s2])
    ledger.collectors["b"].fail(both)
    assert sorted(ledger.collectors["b"].fails) == sorted([r1, r2])


def test_a_retried_walk_reproduces_the_same_ledgers():
    first, second = Ledger(txid=3), Ledger(txid=3)
    walk(first, ack_last=False)
    walk(second, ack_last=False)
    settle = [c.ledger.settle() for c in first.collectors.values()]
    assert settle == [c.ledger.settle() for c in second.collectors.values()]
    assert settle[2][0]  # not trivially empty


def test_forget_drops_the_tuples_it_kept():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", [7]), ("b", [7]))
    task.ack("a", "b")
    assert task.ledger.settle() == ({}, True)
    task.ledger.forget()
    assert task.ledger.acked == []


def test_acking_something_that_is_not_a_tuple_is_a_type_error_whatever_the_count():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", [7]), ("b", [7]))
    task.ack("a")
    task.ledger.ack("b")  # the value, not the tuple; one ack short of the fast check anyway
    task.ledger.ack("b")
    with pytest.raises(TypeError, match="takes a Tuple"):
        task.ledger.settle()


def test_compact_forgets_a_prefix_acked_in_order_and_settle_checks_the_rest():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", [7]), ("b", [7]), ("c", [9]))
    task.ack("a", "b")
    task.ledger.compact()
    assert (task.ledger.settled, task.ledger.acked) == (2, [])
    task.ack("c")
    assert task.ledger.settle() == ({}, True)


def test_a_settled_tuple_acked_again_is_still_caught():
    base = id_base(1, 2, 0)
    task = Deliver(base)
    task.give(("a", [7]), ("b", [9]))
    task.ack("a")
    task.ledger.compact()
    task.ack("b", "a")  # "a" a second time, after its first ack was forgotten
    assert task.ledger.settle() == ({7: tuple_id(base)}, False)


def test_a_missing_ack_after_compaction_leaves_only_its_own_id():
    base = id_base(1, 2, 0)
    task = Deliver(base)
    task.give(("a", [7]), ("b", [7]), ("c", [7]))
    task.ack("a")
    task.ledger.compact()
    task.ack("c")  # "b" is never acked
    assert task.ledger.settle() == ({7: tuple_id(base + 1)}, False)


def test_compact_stops_trying_after_acks_out_of_order():
    task = Deliver(id_base(1, 2, 0))
    task.give(("a", [7]), ("b", [7]), ("c", [9]))
    task.ack("b")
    task.ledger.compact()
    assert (task.ledger.settled, len(task.ledger.acked)) == (0, 1)
    task.ack("a")
    task.ledger.compact()  # in order now, but it no longer tries
    assert (task.ledger.settled, len(task.ledger.acked)) == (0, 2)
    task.ack("c")
    assert task.ledger.settle() == ({}, True)
