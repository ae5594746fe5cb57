"""Dead letters without Spark: the poison rules and counts, the record, the failing tuple.

The tracker runs on an injected clock; the record goes through msgpack as a provider stores it;
the failing tuple goes through the encoded task error as a Spark worker sends it; the hot loop
names the tuple that raised, and not the chunk step; lineage numbers an emission's places and
leaves out the removed ones.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import msgpack
import pytest

from providers import InMemoryKeyValueState, StateBackendError, pack_plain, unpack_plain
from statefulbolts import ConfigError, Fields, Tuple
from statefulbolts.config import validate_config
from statefulbolts.deadletter import (
    BatchOrigin,
    DeadLetter,
    DeadLetterStore,
    FailedTuple,
    LetterState,
    PoisonTracker,
    SpoutOrigin,
    batch_record_id,
    spout_record_id,
    why_not_poison,
)
from statefulbolts.errors import DeadLetterError, FailedException, TopologyError
from statefulbolts.runtime._task import _feed
from statefulbolts.runtime._task_errors import (
    TEXT_CAP,
    FailingTuple,
    decode_task_error,
    encode_task_error,
    exception_types,
)
from statefulbolts.transactional._lineage import (
    REPLAYED,
    BatchChange,
    BatchChanges,
    LineageOut,
    lineage,
    place_of,
)


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.at = start

    def __call__(self) -> float:
        return self.at


# ------------------------------------------------------------------------------ the tracker


def test_a_suspect_is_poison_at_its_nth_failed_transaction_with_its_times() -> None:
    clock = FakeClock()
    tracker = PoisonTracker(3, now=clock)
    seen = []
    for step in range(3):
        clock.at = 1000.0 + 10 * step
        seen.append(tracker.failed("r1", "count"))
    assert [s.failures for s in seen] == [1, 2, 3]
    assert [tracker.is_poison(s) for s in seen] == [False, False, True]
    assert (seen[-1].first_seen, seen[-1].last_seen) == (1000.0, 1020.0)


def test_suspects_count_apart_per_origin_and_component_even_taking_turns() -> None:
    tracker = PoisonTracker(2, now=FakeClock())
    a1, b1 = tracker.failed("a", "count"), tracker.failed("b", "count")
    other = tracker.failed("a", "split")  # the same tuple failing elsewhere: its own count
    a2, b2 = tracker.failed("a", "count"), tracker.failed("b", "count")
    assert (a1.failures, b1.failures, other.failures, a2.failures, b2.failures) == (1, 1, 1, 2, 2)
    assert tracker.is_poison(a2) and tracker.is_poison(b2) and not tracker.is_poison(other)


def test_a_known_record_is_poison_at_once_and_a_commit_or_isolation_forgets() -> None:
    tracker = PoisonTracker(5, now=FakeClock())
    assert tracker.is_poison(tracker.failed("a", "count", known=True))
    first = tracker.failed("b", "count")
    tracker.isolated(first)
    assert tracker.failed("b", "count").failures == 1
    tracker.failed("c", "count")
    tracker.committed()
    assert tracker.suspects == [] and tracker.failed("c", "count").failures == 1


def test_after_failures_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PoisonTracker(0)


@pytest.mark.parametrize(
    ("exc", "root", "trees", "why"),
    [
        (ValueError("x"), 4, 1, None),
        (FailedException("x"), 4, 1, None),  # raised by user code
        (StateBackendError("down"), 4, 1, "StateBackendError is the framework's error"),
        (TopologyError("wiring"), 4, 1, "TopologyError is the framework's error"),
        (ValueError("x"), None, 0, "raised outside execute"),
        (ValueError("x"), 0, 0, "belongs to no spout tuple"),
        (ValueError("x"), 4, 3, "anchored to 3 spout tuples"),
    ],
)
def test_which_failures_are_a_tuple_s_fault(
    exc: Exception, root: int | None, trees: int, why: str | None
) -> None:
    got = why_not_poison(exception_types(exc), root, trees, "spout tuple")
    assert (got is None) if why is None else (got is not None and why in got), got


# ------------------------------------------------------------------------------- the record


def _letter(**more: Any) -> DeadLetter:
    failed = FailedTuple("split", 5, "default", ["poison", b"\x00"], "['poison', b'\\x00']")
    origin = SpoutOrigin("sentences", 1, ("m", 7), "default", ["a poison pill"], "['a']")
    letter = DeadLetter.first(
        "wc", "topology", "count", 9, 1, failed, origin, ("builtins.ValueError",),
        "bad", "Traceback ...", txid=4, attempts=2, at=50.0,
    )  # fmt: skip
    return DeadLetter(**{**letter.__dict__, **more})


def test_a_record_survives_msgpack_as_a_provider_stores_it() -> None:
    letter = _letter()
    back = DeadLetter.from_value(unpack_plain(pack_plain(letter.to_value())))
    assert back == letter and type(back.origin.message_id) is tuple  # ("m", 7): acked as given
    assert json.loads(json.dumps(letter.as_dict()))["failed"]["values"] == ["poison", "b'\\x00'"]
    # A record an earlier version stored (the message id an array) still reads.
    old = DeadLetter.from_value(msgpack.unpackb(msgpack.packb(letter.to_value()), raw=False))
    assert old.origin.message_id == ["m", 7]


def test_a_dead_lettered_tuple_s_values_replay_as_they_were() -> None:
    """Tuples, sets, frozensets, nested: the record keeps them with their types, in the store."""
    values = ["poison", (1, ("a", b"b")), {"x", "y"}, frozenset({(2, 3)}), {"k": [(), set()]}]
    t = Tuple(values, Fields("a", "b", "c", "d", "e"), "sentences", 4, "default", root=11)
    failing = FailingTuple.of(t, 0)
    raised = encode_task_error(ValueError("bad"), "split", 6, 3, "app.Split", failing)
    error = decode_task_error(RuntimeError(f"Java: {raised}"))
    assert error is not None and error.failing is not None
    assert error.failing.values == values
    origin = SpoutOrigin("sentences", 0, (0, 11), "default", error.failing.values, "")
    failed = FailedTuple("sentences", 4, "default", error.failing.values, error.failing.text)
    letter = DeadLetter.first(
        "wc", "topology", "split", 6, 0, failed, origin, ("builtins.ValueError",), "bad", None,
        txid=3, attempts=2, at=5.0,
    )  # fmt: skip
    states: dict[str, InMemoryKeyValueState] = {}

    def state_for(namespace: str) -> InMemoryKeyValueState:
        return states.setdefault(namespace, InMemoryKeyValueState(namespace))

    store = DeadLetterStore({}, transactional_id="w", state_for=state_for)
    store.put(letter)
    [back] = store.records()
    for kept in (back.origin.values, back.failed.values):
        assert kept == values
        assert [type(v) for v in kept] == [str, tuple, set, frozenset, dict]  # type: ignore[union-attr]
        assert type(kept[1][1]) is tuple and type(next(iter(kept[3]))) is tuple  # type: ignore[index]
        assert [type(v) for v in kept[4]["k"]] == [tuple, set]  # type: ignore[index]


class Colour(enum.IntEnum):
    RED = 1


def test_values_that_would_not_read_back_as_they_are_are_kept_as_text_only() -> None:
    """An IntEnum would replay as an int: the record keeps its text, and is not replayable."""
    failing = FailingTuple.of(Tuple([Colour.RED, (1, 2)], Fields("c", "p"), "s", 1), 0)
    assert failing.values is None and failing.text == "[<Colour.RED: 1>, (1, 2)]"


def test_record_ids_are_one_per_origin() -> None:
    base = spout_record_id("wc", "sentences", 0, 17)
    assert base == spout_record_id("wc", "sentences", 0, 17)
    others = {
        spout_record_id("wc", "sentences", 0, 18),
        spout_record_id("wc", "sentences", 1, 17),
        spout_record_id("wc", "other", 0, 17),
        spout_record_id("wc2", "sentences", 0, 17),
        spout_record_id("wc", "sentences", 0, "17"),
    }
    assert base not in others and len(others) == 5
    assert batch_record_id("w", 3, "partition", 1, 1) != batch_record_id("w", 3, "partition", 1, 2)
    assert _letter().id == spout_record_id("wc", "sentences", 1, ("m", 7))


def test_dead_lettered_again_adds_attempts_and_keeps_first_seen_and_origin() -> None:
    held = _letter(state=LetterState.REPLAY, attempts=2, first_seen=10.0, last_seen=20.0)
    newer = _letter(attempts=3, first_seen=90.0, last_seen=95.0, txid=9, message="worse")
    newer = DeadLetter(**{**newer.__dict__, "origin": BatchOrigin(9, "replayed", 0, 0)})
    again = held.again(newer)
    assert (again.id, again.origin, again.first_seen) == (held.id, held.origin, 10.0)
    assert (again.attempts, again.last_seen, again.txid, again.message) == (5, 95.0, 9, "worse")
    assert (again.state, again.replays) == (LetterState.DEAD, 1)


@pytest.mark.parametrize(
    "broken",
    [
        "nonsense",
        {"id": "x"},
        {**_letter().to_value(), "state": "zombie"},
        {**_letter().to_value(), "origin": {"kind": "tape"}},
    ],
)
def test_a_record_not_in_the_stored_form_is_a_dead_letter_error(broken: Any) -> None:
    with pytest.raises(DeadLetterError, match="'wc/\\$deadletter' key 'k'"):
        DeadLetter.from_value(broken, "'wc/$deadletter' key 'k'")


# ------------------------------------------------------------------------ the failing tuple


def test_the_failing_tuple_travels_in_the_task_error() -> None:
    t = Tuple(["attempt", "poison", 3], Fields("id", "word", "n"), "split", 6, "words", root=42)
    failing = FailingTuple.of(t, 1, lead=1)
    raised = encode_task_error(ValueError("bad"), "count", 9, 4, "app.Count", failing)
    error = decode_task_error(RuntimeError(f"Java: {raised}"))
    assert error is not None and error.failing == failing
    assert (failing.values, failing.text, failing.root, failing.trees) == (
        ["poison", 3], "['poison', 3]", 42, 1
    )  # fmt: skip
    assert (failing.task_index, failing.source_component, failing.source_task) == (1, "split", 6)
    assert failing.stream == "words"


def test_values_msgpack_cannot_hold_travel_as_text_only_cut() -> None:
    t = Tuple([object(), "x" * 5000], Fields("a", "b"), "split", 6)
    failing = FailingTuple.of(t, 0)
    assert failing.values is None and len(failing.text) == TEXT_CAP + 3
    assert failing.root == 0 and failing.trees == 0
    big = FailingTuple.of(Tuple(["y" * 10_000], Fields("a"), "s", 1), 0)
    assert big.values is None and big.text.endswith("...")


def _run_feed(execute: Any, chunked: Any) -> list[Tuple]:
    failing: list[Tuple] = []
    with pytest.raises(ValueError, match="boom"):
        _feed(execute, ["a", "b", "c"], [7, 8, 9], 0, True, (Fields("w"), "s", 1, "default"),
              (), chunked, failing)  # fmt: skip
    return failing


def test_the_hot_loop_names_the_tuple_whose_execute_raised() -> None:
    def execute(t: Tuple) -> None:
        if t.values == ["b"]:
            msg = "boom"
            raise ValueError(msg)

    [failing] = _run_feed(execute, lambda: None)
    assert (failing.values, failing._root) == (["b"], 8)


def test_the_hot_loop_names_no_tuple_when_its_chunk_step_raised() -> None:
    def chunked() -> None:
        msg = "boom"
        raise ValueError(msg)

    assert _run_feed(lambda t: None, chunked) == []


# --------------------------------------------------------------------------------- the config


def test_config_keys_defaults_and_an_unreachable_after_failures() -> None:
    tc = validate_config({})
    assert (tc.deadletter_policy, tc.deadletter_after_failures, tc.deadletter_max) == (
        "isolate", 2, 100
    )  # fmt: skip
    with pytest.raises(ConfigError, match="topology.deadletter.policy"):
        validate_config({"topology.deadletter.policy": "drop"})
    with pytest.raises(ConfigError, match="topology.max.transaction.retries \\+ 1 = 2"):
        validate_config(
            {"topology.deadletter.after.failures": 3, "topology.max.transaction.retries": 1}
        )
    stop = {"topology.deadletter.after.failures": 3, "topology.max.transaction.retries": 1}
    assert validate_config({**stop, "topology.deadletter.policy": "stop"}).deadletter_max == 100


# ---------------------------------------------------------------------------------- the store


def test_the_store_keeps_records_and_counts_changes() -> None:
    states: dict[str, InMemoryKeyValueState] = {}

    def state_for(namespace: str) -> InMemoryKeyValueState:
        return states.setdefault(namespace, InMemoryKeyValueState(namespace))

    store = DeadLetterStore({}, transactional_id="words", state_for=state_for)
    assert store.namespace == "$transactional/words/$deadletter"
    one, two = _letter(), _letter(id="other", first_seen=1.0)
    store.put(one, two)
    assert [r.id for r in store.records()] == ["other", one.id] and store.count() == 2
    assert store.changes() == 0
    assert [r.state for r in store.request_replay([one.id, "missing"])] == [LetterState.REPLAY]
    assert store.changes() == 1 and store.get(one.id).state == LetterState.REPLAY  # type: ignore[union-attr]
    assert store.delete(["other", "missing"]) == ["other"] and store.changes() == 1
    assert store.delete([one.id], changed=True) == [one.id] and store.changes() == 2
    assert store.records() == [] and store.get(one.id) is None


@pytest.mark.parametrize(("topology", "tid"), [(None, None), ("a", "b"), ("a/b", None), ("", None)])
def test_a_store_names_one_topology(topology: str | None, tid: str | None) -> None:
    with pytest.raises(DeadLetterError):
        DeadLetterStore({}, topology=topology, transactional_id=tid)


# -------------------------------------------------------------------------------- lineages


class _Out:
    def __init__(self) -> None:
        self.sent: list[tuple[int, list[Any], str]] = []

    def emit_with_lineage(self, values: Any, stream: str, lineage: int) -> list[int]:
        self.sent.append((lineage, list(values), stream))
        return [1]

    def report_error(self, error: BaseException) -> None:
        raise AssertionError(error)


def test_an_emission_numbers_its_places_and_leaves_out_the_removed() -> None:
    out, dropped = _Out(), {}
    sink = LineageOut(out, 2, frozenset({lineage(2, 1)}), dropped)
    for word in ("a", "b", "c"):
        sink.emit(["attempt", word], "words")
    assert out.sent == [(lineage(2, 0), ["attempt", "a"], "words"),
                        (lineage(2, 2), ["attempt", "c"], "words")]  # fmt: skip
    assert dropped == {lineage(2, 1): ("words", ["b"])}
    assert place_of(lineage(REPLAYED, 5)) == (REPLAYED, 5)


def test_batch_changes_are_stored_per_txid() -> None:
    changes = BatchChanges(InMemoryKeyValueState("t/$deadletter-batches"))
    changes.put(3, BatchChange((lineage(0, 1),), (("rid", "default", ["x"]),)))
    changes.put(4, BatchChange())
    assert changes.all() == {
        3: BatchChange((lineage(0, 1),), (("rid", "default", ["x"]),)),
        4: BatchChange(),
    }
    changes.drop([3, 9])
    assert list(changes.all()) == [4]
