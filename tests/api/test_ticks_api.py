"""Tick tuples, the pure parts: recognising one, which bolt ticks how often, the schedule.

The runner's use of them (delivery, replays, restarts): ``tests/checkpoint/test_ticks_runner.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

import statefulbolts
from checkpoint._ticks import TickSchedule
from checkpoint._txstart import TransactionStart, TransactionStarts
from examples.transactional_global_count import BatchCount, UpdateGlobalCount
from providers import InMemoryKeyValueState
from statefulbolts import (
    BasicBolt,
    Bolt,
    Fields,
    MemoryTransactionalSpout,
    Spout,
    TopologyBuilder,
    TransactionalTopologyBuilder,
    Tuple,
    is_tick_tuple,
    validate_config,
)
from statefulbolts.errors import CheckpointError, ConfigError
from statefulbolts.ticks import (
    SYSTEM_COMPONENT_ID,
    SYSTEM_TASK_ID,
    TICK_FREQ_KEY,
    TICK_STREAM_ID,
    tick_frequencies,
    tick_tuple,
)
from statefulbolts.transactional.runner import TransactionalRunner


class Source(Spout):
    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        return None

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


class Echo(BasicBolt):
    def __init__(self, own: Any = None) -> None:
        self.own = own

    def get_component_configuration(self) -> Any:
        return self.own

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit(list(tuple.values))

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


def test_a_tick_tuple_is_storms_and_is_told_from_data() -> None:
    tick = tick_tuple(7)
    assert (SYSTEM_COMPONENT_ID, SYSTEM_TASK_ID, TICK_STREAM_ID) == ("__system", -1, "__tick")
    assert (tick.source_component, tick.source_task, tick.source_stream_id) == (
        "__system",
        -1,
        "__tick",
    )
    assert tick.get_value_by_field("rate_secs") == 7 and tick.anchors == ()
    assert is_tick_tuple(tick)
    data = Tuple(["x"], Fields("value"), "split", 2)
    assert not is_tick_tuple(data)
    # Both marks are needed: the system component's other streams are not ticks.
    assert not is_tick_tuple(Tuple([1], Fields("n"), SYSTEM_COMPONENT_ID, -1, "__metrics"))
    assert not is_tick_tuple(Tuple([1], Fields("n"), "split", 2, TICK_STREAM_ID))
    assert statefulbolts.is_tick_tuple is is_tick_tuple
    assert statefulbolts.TICK_STREAM_ID == "__tick"
    assert statefulbolts.SYSTEM_COMPONENT_ID == "__system"


def _components(
    declared: Any = None, own: Any = None, *, spout_setting: Any = None
) -> Mapping[str, Any]:
    builder = TopologyBuilder()
    spout = builder.set_spout("source", Source())
    if spout_setting is not None:
        spout.add_configuration(TICK_FREQ_KEY, spout_setting)
    first = builder.set_bolt("first", Echo(own)).shuffle_grouping("source")
    if declared is not None:
        first.add_configuration(TICK_FREQ_KEY, declared)
    builder.set_bolt("second", Echo()).shuffle_grouping("first")
    return builder.create_topology().components


@pytest.mark.parametrize(
    ("declared", "own", "topology_wide", "expected"),
    [
        (None, None, None, {}),  # nothing set: no bolt ticks
        (None, None, 10, {"first": 10, "second": 10}),  # topology-wide: every bolt
        (None, {TICK_FREQ_KEY: 3}, None, {"first": 3}),  # the bolt's own configuration
        (None, {TICK_FREQ_KEY: 3}, 10, {"first": 3, "second": 10}),
        (5, {TICK_FREQ_KEY: 3}, 10, {"first": 5, "second": 10}),  # the declarer's wins
        (None, {TICK_FREQ_KEY: None, "other": 1}, 10, {"first": 10, "second": 10}),
        (None, {}, None, {}),
    ],
)
def test_a_bolts_frequency_is_the_declarers_then_its_own_then_the_topologys(
    declared: Any, own: Any, topology_wide: int | None, expected: dict[str, int]
) -> None:
    components = _components(declared, own, spout_setting=4)  # spouts never tick
    assert tick_frequencies(components, topology_wide) == expected


@pytest.mark.parametrize("bad", [0, -2, 1.5, "5", True])
def test_a_bad_component_frequency_is_a_config_error_naming_key_and_component(bad: Any) -> None:
    expected = (
        rf"component 'first': {TICK_FREQ_KEY} must be an int >= 1 \(seconds between tick "
        rf"tuples\) or None, got {bad!r}"
    )
    with pytest.raises(ConfigError, match=expected):
        tick_frequencies(_components(declared=bad), None)
    with pytest.raises(ConfigError, match=expected):
        tick_frequencies(_components(own={TICK_FREQ_KEY: bad}), None)


def test_a_component_configuration_that_is_not_a_mapping_is_named() -> None:
    with pytest.raises(ConfigError, match=r"component 'first': .*Echo.get_component_configuration"):
        tick_frequencies(_components(own=[("a", 1)]), None)


@pytest.mark.parametrize("bad", [0, 2.5, "3", True])
def test_a_bad_topology_frequency_is_a_config_error_naming_the_key(bad: Any) -> None:
    with pytest.raises(ConfigError, match=rf"{TICK_FREQ_KEY}: .*\(got {bad!r}\)"):
        validate_config({TICK_FREQ_KEY: bad})
    assert validate_config({TICK_FREQ_KEY: 30}).tick_tuple_freq_secs == 30
    assert validate_config({}).tick_tuple_freq_secs is None
    assert statefulbolts.Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS == TICK_FREQ_KEY


def test_every_tick_due_is_taken_once_none_coalesced() -> None:
    schedule = TickSchedule({"a": 1, "b": 3}, start_ms=500)
    assert not schedule.due(1499) and schedule.take(1499) == {}
    assert schedule.due(1500)
    assert schedule.take(1500) == {"a": 1}
    # A slow transaction: 10 s pass; each tick due is delivered, none merged.
    assert schedule.take(11_500) == {"a": 10, "b": 3}
    assert schedule.take(11_999) == {}
    assert schedule.next_due_ms == 12_500
    # A failed batch gives its ticks back: the next take has them first.
    schedule.give_back({"a": 2, "b": 0})
    assert schedule.due(11_999)
    assert schedule.take(12_500) == {"a": 3, "b": 1}
    assert schedule.frequencies == {"a": 1, "b": 3}
    assert TickSchedule({}, 0).next_due_ms is None and not TickSchedule({}, 0).due(10**9)


def test_a_transaction_start_is_reused_by_its_replays_and_saved_for_a_restart() -> None:
    state = InMemoryKeyValueState("txstart/$checkpointspout-0")
    now = [1000.0]
    due = [{"a": 1}]
    starts = TransactionStarts(state, lambda: now[0], lambda: due.pop(0))
    assert starts.time_of(0) == 1000.0  # before any start: the clock
    first = starts.begin(0)
    now[0] = 5000.0
    assert starts.begin(0) is first  # PREPARE(0) again: same time, same ticks, none taken
    state.commit()
    restarted = TransactionStarts(state, lambda: 9000.0, lambda: {"a": 4})
    assert restarted.begin(0) == first == TransactionStart(0, 1000.0, {"a": 1})
    assert restarted.begin(1) == TransactionStart(1, 9000.0, {"a": 4})
    assert restarted.time_of(1) == 9000.0


@pytest.mark.parametrize(
    "saved",
    [
        [1, 2.0, {}],
        {"txid": "1", "time_ms": 2.0, "ticks": {}},
        {"txid": 1, "time_ms": "2", "ticks": {}},
        {"txid": 1, "time_ms": 2.0, "ticks": {"a": "1"}},
        {"txid": True, "time_ms": 2.0, "ticks": {}},
    ],
)
def test_a_saved_start_in_another_form_is_refused(saved: Any) -> None:
    with pytest.raises(CheckpointError, match=r"saved transaction start '__txstart' is"):
        TransactionStart.from_value(saved)


def _transactional(bolt_setting: Any = None) -> Any:
    spout = MemoryTransactionalSpout({0: [["a"]]}, ["word"], 3)
    builder = TransactionalTopologyBuilder("ticks-tx", "spout", spout, 1)
    partial = builder.set_bolt("partial", BatchCount()).none_grouping("spout")
    if bolt_setting is not None:
        partial.add_configuration(TICK_FREQ_KEY, bolt_setting)
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial")
    return builder.build_topology()


def test_a_transactional_topology_refuses_ticks_for_its_batch_bolts() -> None:
    said = r"a transactional topology: its batch bolts get no tick tuples \(as in Storm\)"
    with pytest.raises(ConfigError, match=rf"set in component 'partial', {said}"):
        TransactionalRunner("tx-ticks", {}, _transactional(5), None, engine="inline")
    with pytest.raises(ConfigError, match=rf"the topology config of 'tx-ticks', {said}"):
        TransactionalRunner("tx-ticks", {TICK_FREQ_KEY: 5}, _transactional(), None, engine="inline")


def test_a_plain_bolt_and_a_basic_bolt_both_read_their_own_configuration() -> None:
    class Own(Bolt):
        def execute(self, tuple: Any) -> None:  # noqa: A002
            return None

        def get_component_configuration(self) -> Mapping[str, Any]:
            return {TICK_FREQ_KEY: 9}

    builder = TopologyBuilder()
    builder.set_spout("source", Source())
    builder.set_bolt("own", Own()).shuffle_grouping("source")
    builder.set_bolt("basic", Echo({TICK_FREQ_KEY: 8})).shuffle_grouping("source")
    assert tick_frequencies(builder.create_topology().components, None) == {"basic": 8, "own": 9}
