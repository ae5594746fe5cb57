"""Sealing what a task emitted (``statefulbolts.runtime._sealing``), without Spark.

A task pickles each values column it sends once (``TaskCollector.seal``), not the columns for a
stage pipelined into its own Python task; the driver seals its spout tuples
(``seal_inputs``); a column that does not pickle is searched value by value, and the error
names the tuple to blame (``unshippable_error``).
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest

from statefulbolts import BasicBolt, Fields, Spout, TopologyBuilder
from statefulbolts.runtime._collector import TaskCollector
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._records import TupleBatch
from statefulbolts.runtime._sealing import (
    Unshippable,
    find_unshippable,
    seal_inputs,
    unshippable_error,
)
from statefulbolts.runtime._task_errors import FailingTuple, decode_task_error


class Lines(Spout):
    def next_tuple(self) -> None:
        """Never called."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("line"))


class Pass(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit(tuple.values)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word", "n"))


def _plan() -> ExecutionPlan:
    """``lines`` -> ``split`` -shuffle-> ``pairs`` -chained-> ``sink``."""
    builder = TopologyBuilder()
    builder.set_spout("lines", Lines(), 1)
    builder.set_bolt("split", Pass(), 2).shuffle_grouping("lines")
    builder.set_bolt("pairs", Pass(), 2).shuffle_grouping("split")
    builder.set_bolt("sink", Pass(), 2).local_or_shuffle_grouping("pairs")
    return ExecutionPlan(builder.create_topology())


def test_the_one_value_that_does_not_pickle_is_found_with_its_field() -> None:
    lock = threading.Lock()
    found = find_unshippable(["a", ["b", 1], ["c", lock], ["d", lock]], 2, start=1)
    assert found is not None
    assert (found.row, found.field, found.value) == (2, 1, lock)
    assert str(found.error) == "cannot pickle '_thread.lock' object"
    assert find_unshippable(["a", "b"], 1) is None
    gen = (n for n in range(2))
    assert find_unshippable(["a", gen], 1)[:3] == (1, None, gen)  # type: ignore[index]


def test_a_task_seals_each_column_once_and_not_what_is_pipelined() -> None:
    plan = _plan()
    pairs, sink = plan.index["pairs"], plan.index["sink"]
    layout = plan.layout([plan.index["split"], pairs, sink], chain=True)
    assert layout.narrow == (False, True)
    assert layout.pipelined(1) == frozenset({sink}) and layout.pipelined(0) == frozenset()
    collector = TaskCollector(plan, pairs, 0, 1, "pairs", pipelined=layout.pipelined(1))
    collector.emit_to(["a", 1])
    assert collector.seal() is None
    [batch] = list(collector.records())
    assert type(batch.values) is list and batch.dest == sink  # chained: goes on as objects
    split = TaskCollector(plan, plan.index["split"], 0, 1, "split")
    split.emit_to(["x", 1])
    split.emit_to(["y", 2])
    assert split.seal() is None
    sealed = list(split.records())
    assert all(type(b.values) is bytes for b in sealed)
    assert sorted(v for b in sealed for v in b.column()) == [["x", 1], ["y", 2]]
    assert pickle.loads(sealed[0].values) == sealed[0].column()
    split.emit_to(["z", 3])  # after the seal: records must not hand on a stale column
    with pytest.raises(RuntimeError, match="emitted into after it was sealed"):
        list(split.records())


def test_a_column_that_does_not_seal_names_the_batch_and_the_error() -> None:
    plan = _plan()
    split = TaskCollector(plan, plan.index["split"], 1, 1, "split")
    split.emit_to(["x", threading.Lock()], root=9)
    unsealed = split.seal()
    assert unsealed is not None
    assert unsealed.key[0] == plan.index["pairs"] and "lock" in str(unsealed.error)


def _input(plan: ExecutionPlan, words: list[str], roots: list[int]) -> TupleBatch:
    lines, split = plan.index["lines"], plan.index["split"]
    return TupleBatch(split, 1, lines, 0, 0, words, roots, None)


def test_of_several_tuples_of_a_tree_the_one_emitting_it_again_is_blamed() -> None:
    plan = _plan()
    split = plan.index["split"]
    inputs = [(_input(plan, ["the", "poison", "pill"], [7, 7, 7]), 40)]
    out = TaskCollector(plan, split, 1, 1, "split")
    out.emit_to(["the", 1], root=7)
    out.emit_to(["poison", threading.Lock()], root=7)
    unsealed = out.seal()
    assert unsealed is not None
    again: list[tuple[int, int]] = []

    def execute_again(batch: TupleBatch, first: int, i: int) -> None:
        again.append((first, i))
        word = batch.column()[i]
        out.emit_to([word, threading.Lock() if word == "poison" else 1], root=7)

    error = unshippable_error(
        plan, split, 1, out.batches, unsealed.key, unsealed.error, inputs, execute_again
    )
    assert again == [(40, 0), (40, 1)]  # until the one that emits it
    assert error.failing == FailingTuple(1, "lines", plan.task_ids[plan.index["lines"]][0],
                                         "default", ["poison"], "['poison']", 7, 1, 0)  # fmt: skip
    assert str(error) == (
        "bolt 'split' task index 1 emitted a value of type _thread.lock on stream 'default' "
        "field 'n' that cannot be pickled to travel to the task it is for (TypeError: cannot "
        "pickle '_thread.lock' object); emit values that pickle: no locks, sockets, open files "
        "or generators, no structure nested hundreds deep"
    )


def test_a_tuple_that_does_not_emit_it_again_leaves_the_first_of_its_tree() -> None:
    """A bolt that emits it only once (or raises when executed again) cannot be searched."""
    plan = _plan()
    split = plan.index["split"]
    inputs = [(_input(plan, ["a", "b", "c"], [3, 5, 5]), 0)]
    out = TaskCollector(plan, split, 1, 1, "split")
    out.emit_to(["b", threading.Lock()], root=5)
    unsealed = out.seal()
    assert unsealed is not None

    def raising(batch: TupleBatch, first: int, i: int) -> None:
        msg = "not twice"
        raise ValueError(msg)

    error = unshippable_error(
        plan, split, 1, out.batches, unsealed.key, unsealed.error, inputs, raising
    )
    assert error.failing is not None and error.failing.values == ["b"]  # the first of tree 5
    after = unshippable_error(plan, split, 1, out.batches, unsealed.key, unsealed.error, (), None)
    assert after.failing is None  # after finish: no tuple, as for an exception raised there


def test_an_unrooted_value_or_a_spout_s_is_the_emitted_tuple() -> None:
    plan = _plan()
    split, lines = plan.index["split"], plan.index["lines"]
    out = TaskCollector(plan, split, 0, 1, "split")
    out.emit_to(["u", threading.Lock()], root=0)
    unsealed = out.seal()
    assert unsealed is not None
    error = unshippable_error(plan, split, 0, out.batches, unsealed.key, unsealed.error, (), None)
    facts = error.failing
    assert isinstance(facts, FailingTuple)
    assert (facts.source_component, facts.stream, facts.values, facts.root, facts.trees) == (
        "split", "default", None, 0, 0,
    )  # fmt: skip
    assert facts.text.startswith("['u', <unlocked _thread.lock object at 0x")
    spout = TaskCollector(plan, lines, 0, 1, "lines")
    spout.emit_to([threading.Lock()], root=12)
    unsealed = spout.seal()
    assert unsealed is not None
    error = unshippable_error(plan, lines, 0, spout.batches, unsealed.key, unsealed.error, (), None)
    assert error.failing.root == 12 and error.failing.trees == 1
    assert str(error).startswith("spout 'lines' task index 0 emitted a value of type _thread.lock")


def test_the_driver_seals_spout_tuples_and_names_one_that_does_not_pickle() -> None:
    plan = _plan()
    lines, split = plan.index["lines"], plan.index["split"]
    good = TupleBatch(split, 0, lines, 0, 0, ["a line"], [1], None)
    sealed_before = good._replace(values=pickle.dumps(["b"]))
    [[first, second]] = seal_inputs(plan, 4, [[good, sealed_before]])
    assert first.column() == ["a line"] and second is sealed_before
    bad = TupleBatch(split, 1, lines, 0, 0, ["ok", threading.Lock()], [1, 2], None)
    with pytest.raises(Exception) as caught:
        seal_inputs(plan, 4, [[good], [bad]])
    error = decode_task_error(caught.value)
    assert error is not None
    assert (error.component, error.task, error.txid) == ("lines", 0, 4)  # task index 0
    assert error.types[0] == "statefulbolts.errors.UnshippableValueError"
    assert error.user_class == f"{__name__}.Lines"
    failing = error.failing
    assert failing is not None
    spout_task = plan.task_ids[lines][0]
    assert (failing.source_component, failing.source_task, failing.root, failing.trees) == (
        "lines", spout_task, 2, 1,
    )  # fmt: skip
    assert failing.source_task_index == 0
    assert error.message.startswith(
        "spout 'lines' task index 0 emitted a value of type _thread.lock on stream 'default' "
        "field 'line' that cannot be pickled"
    )


def test_unshippable_is_a_namedtuple_of_what_was_found() -> None:
    found = Unshippable(3, 1, "v", TypeError("x"))
    assert (found.row, found.field, found.value) == (3, 1, "v")
