"""The Kafka sink's producers in one process: kept per lane between publish steps, and fed fast.

**Kept producers.** A publish step (``KafkaSink.publish``) needs a transactional producer of
its lane's ``transactional.id``. Making one runs ``init_transactions``: 3-5 ms with the sink's
eager connections on a near broker, more on a loaded machine or a far cluster, for every sink
task at every COMMIT; it also connects to the cluster. So a process keeps the producer a
step ended with, clean, for the lane's next step in the same process (a Spark Python worker
is reused from job to job): ``take_producer`` hands it out, ``keep_producer`` puts it back.
What makes that safe:

1. **Only a clean producer is kept**: one whose step committed its transaction, or opened
   none. A step that fails in any way closes its producer (``close``); nothing it queued or
   opened is left in a producer another step could take.
2. **A kept producer is taken out while it is used**: two steps of a lane in one process
   never share one; the second makes a new producer, which fences the first, as two
   attempts in two processes do.
3. **Kafka decides whether it is still the lane's**: any producer of the id made since (a
   later attempt of the task, in another worker or executor, or after a restart) fenced it,
   and the coordinator refuses it. A step with a kept producer checks that before a record
   goes out (its ``send_offsets_to_transaction``, the marker, comes first in the
   transaction); refused, or failing in any way before its first record, the step closes it
   and starts again with a new producer. A producer refused later never commits: fenced
   producers cannot.
4. **Nothing kept outlives its settings**: the key is the ``transactional.id`` with every
   client setting, so a config with other brokers or credentials gets a producer of its own.

**Warmed producers.** A lane whose process keeps no producer gets one made ahead, while its
PREPARE runs (``warm_producer``, on a thread of its own): the COMMIT that follows, when it runs
in the same process, finds it kept and pays no ``init_transactions``. Until it is made, the
keeping holds its future: ``take_producer`` waits for it (its ``init_transactions`` keeps to
its own time limit), so a step never makes a second producer that the warmed one would fence.
Making it early is safe because a lane's PREPARE starts only after its last COMMIT ended (one
transaction at a time): it fences only what a new producer at the COMMIT would have fenced.
A warmed producer is a kept one from then on: rule 3 checks it, and one that failed to be
made is forgotten (the step makes its own, and says why if that fails too).

**Idle clients closed.** A process outlives its topologies (a Spark Python worker serves every
job of the application), and a client of a cluster that went away tries to reconnect, and
logs each failure, for as long as it lives. So a kept producer unused for ``KEPT_IDLE_S`` is
closed (``close_idle``), and so are the sink's other clients kept per process: a daemon thread
runs the checks registered with ``on_idle_check``, started with the first client kept.

**The produce loop** (``produce_all``) is the one per-record Python loop of a publish: a
positional ``produce`` call per record, no callback object and no headers list unless a
record has headers. Delivery reports come only for records the cluster refused
(``delivery.report.only.error``), to the producer's one ``delivered`` callback. The loop
serves the client's events (``poll(0)``) every ``POLL_EVERY`` records: left to the final
``flush``, half a million queued records cost a transaction 0.33-0.35 s and 0.40-0.42 s of
CPU on the test broker, served every 20,000 0.26-0.29 s and 0.31-0.33 s.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from itertools import islice
from typing import Any

from statefulbolts.connectors.sinks import StagedColumns

__all__ = [
    "KEPT_AT_MOST",
    "KEPT_IDLE_S",
    "LaneProducer",
    "ProducerKey",
    "close",
    "close_idle",
    "keep_producer",
    "on_idle_check",
    "produce_all",
    "take_producer",
    "warm_producer",
]

log = logging.getLogger(__name__)

# What identifies a kept producer: its transactional.id and every setting it was made with.
ProducerKey = tuple[str, tuple[tuple[str, Any], ...]]

# Lanes a process keeps a producer for, at most: a worker runs few sink tasks; past this the
# producer used least recently is closed (a lane of a parallelism given up, say).
KEPT_AT_MOST = 32
# A kept client unused this long is closed (see the docstring); checked four times as often.
KEPT_IDLE_S = 600.0
# How long to wait for room when the producer's local queue is full.
_FULL_WAIT_S = 0.005
# The produce loop serves the client's events after this many records (see the docstring).
POLL_EVERY = 20_000
# A staged field that is not one value for every record (``_produce_columns``).
_VARIES: Any = object()


class LaneProducer:
    """A transactional producer of one lane, with what its steps share.

    ``client``: the confluent-kafka ``Producer``; ``metadata``: the lane group's metadata for
    ``send_offsets_to_transaction``; ``refused``: what the cluster refused in the current
    step (its ``delivered`` callback fills it; ``start_step`` empties it). One step at a time
    uses a producer: a kept one is taken out while used, and the at-least-once writer that
    threads of a process share is used under ``lock``, so no step's refusals are another's.
    """

    __slots__ = ("client", "lock", "metadata", "refused")

    def __init__(self) -> None:
        self.client: Any = None
        self.metadata: Any = None
        self.refused: list[str] = []
        self.lock = threading.Lock()

    def delivered(self, error: Any, message: Any) -> None:
        """The delivery report of a record the cluster refused (only those are reported)."""
        if error is not None and len(self.refused) < 3:
            self.refused.append(f"{message.topic()}: {error.str()} ({error.name()})")

    def start_step(self) -> None:
        """Forget the refusals of an earlier step."""
        self.refused.clear()


# A kept producer, or the future of one being made (``warm_producer``).
_Entry = LaneProducer | Future[LaneProducer]

_KEPT: collections.OrderedDict[ProducerKey, _Entry] = collections.OrderedDict()
_KEPT_LOCK = threading.Lock()
# When each entry of ``_KEPT`` was last kept or asked for (``time.monotonic``; under the lock).
_USED: dict[ProducerKey, float] = {}


def take_producer(key: ProducerKey) -> LaneProducer | None:
    """The producer kept for ``key``, taken out of the keeping (``None``: none kept).

    One being made (``warm_producer``) is waited for; one that could not be made is ``None``.
    """
    with _KEPT_LOCK:
        entry = _KEPT.pop(key, None)
        _USED.pop(key, None)
    if not isinstance(entry, Future):
        return entry
    try:
        return entry.result()
    except Exception as exc:  # noqa: BLE001 - the step makes its own, and says why if it fails
        log.debug("a warmed Kafka sink producer was not made: %s: %s", type(exc).__name__, exc)
        return None


def keep_producer(key: ProducerKey, producer: LaneProducer) -> None:
    """Keep a clean ``producer`` for ``key``'s next step; one kept already is closed."""
    with _KEPT_LOCK:
        old = _KEPT.pop(key, None)
        _KEPT[key] = producer
        _USED[key] = time.monotonic()
        gone = _over_the_bound()
    for entry in [*([old] if old is not None else []), *gone]:
        _close_entry(entry)
    on_idle_check(close_idle)


def warm_producer(key: ProducerKey, make: Callable[[], LaneProducer]) -> bool:
    """Make ``key``'s producer now, on a thread, kept when made; whether one is on its way.

    Nothing is made when one is kept or on its way already (see the module docstring).
    """
    with _KEPT_LOCK:
        _USED[key] = time.monotonic()
        if key in _KEPT:
            _KEPT.move_to_end(key)
            return False
        coming: Future[LaneProducer] = Future()
        _KEPT[key] = coming
        gone = _over_the_bound()
    for entry in gone:
        _close_entry(entry)
    on_idle_check(close_idle)

    def run() -> None:
        try:
            coming.set_result(make())
        except BaseException as exc:  # noqa: BLE001 - handed to whoever takes it
            coming.set_exception(exc)

    threading.Thread(target=run, name="kafka-sink-warm", daemon=True).start()
    return True


def _over_the_bound() -> list[_Entry]:
    """Take out the entries used least recently past ``KEPT_AT_MOST`` (under ``_KEPT_LOCK``)."""
    gone = [_KEPT.popitem(last=False) for _ in range(len(_KEPT) - KEPT_AT_MOST)]
    for key, _ in gone:
        _USED.pop(key, None)
    return [entry for _, entry in gone]


def close_idle(now: float | None = None, idle_s: float = KEPT_IDLE_S) -> int:
    """Close the kept producers unused for ``idle_s`` seconds by ``now``; how many.

    ``now`` is ``time.monotonic()`` unless given. One still being made is left to its step.
    """
    now = time.monotonic() if now is None else now
    with _KEPT_LOCK:
        idle = [
            key
            for key, entry in _KEPT.items()
            if now - _USED.get(key, now) >= idle_s
            and not (isinstance(entry, Future) and not entry.done())
        ]
        gone = [_KEPT.pop(key) for key in idle]
        for key in idle:
            _USED.pop(key, None)
    for entry in gone:
        _close_entry(entry)
    if gone:
        log.debug("KafkaSink: closed %s producers unused for %s s", len(gone), idle_s)
    return len(gone)


_CHECKS: list[Callable[[float], object]] = []
_CHECKS_LOCK = threading.Lock()


def on_idle_check(check: Callable[[float], object]) -> None:
    """Have ``check(time.monotonic())`` run every ``KEPT_IDLE_S / 4`` s on the checks' thread.

    The thread starts with the first check (a daemon: it never holds a process open); a
    check given again is not added twice. A check that raises is logged, and runs again next
    time.
    """
    with _CHECKS_LOCK:
        if check in _CHECKS:
            return
        _CHECKS.append(check)
        if len(_CHECKS) > 1:
            return
    threading.Thread(target=_run_checks, name="kafka-sink-idle", daemon=True).start()


def _run_checks() -> None:
    while True:
        time.sleep(KEPT_IDLE_S / 4)
        with _CHECKS_LOCK:
            checks = list(_CHECKS)
        for check in checks:
            try:
                check(time.monotonic())
            except Exception:
                log.warning("KafkaSink: closing idle clients failed", exc_info=True)


def _close_entry(entry: _Entry) -> None:
    """Close a kept producer, or the one a future gives once it is made."""
    if not isinstance(entry, Future):
        close(entry.client)
        return

    def made(future: Future[LaneProducer]) -> None:
        if future.exception() is None:
            close(future.result().client)

    entry.add_done_callback(made)


def close(client: Any, *, wait: bool = True) -> None:
    """Drop whatever is queued and close (a closed step's records were flushed or aborted).

    ``wait=False``: close on a daemon thread of its own, for a producer whose transaction may
    still be open (its abort failed): confluent-kafka's ``close`` aborts an open transaction
    and flushes with no time limit, and a coordinator that does not answer would hold the
    step for ever. The lane's next producer fences it anyway.
    """
    if client is None:
        return
    if not wait:
        threading.Thread(target=close, args=(client,), name="kafka-sink-close", daemon=True).start()
        return
    try:
        client.purge()
        client.close()
    except Exception as exc:  # noqa: BLE001 - closing must not hide the step's result
        # confluent-kafka 2.16 raises SystemError from close() of a producer whose
        # init_transactions failed; the client is gone either way.
        log.debug("KafkaSink: closing a producer: %s: %s", type(exc).__name__, exc)


def produce_all(
    client: Any,
    records: Sequence[Sequence[Any]],
    own_topic: str | None,
    extra: list[tuple[str, bytes]],
    deadline: float,
    full: Callable[[], BaseException],
) -> None:
    """Queue every staged record (``[topic, partition, key, value, headers]``), in order.

    ``own_topic``: the topic of a record whose topic is ``None`` (the sink's own); ``extra``:
    headers added to every record; ``full()``: the error to raise when the local queue stays
    full until ``deadline``.

    Raises:
        ValueError: a record of no topic, and no ``own_topic``.
    """
    rows: Iterable[Sequence[Any]] = records
    topics: Iterable[Any] = (r[0] for r in records)
    if isinstance(records, StagedColumns):
        if _produce_columns(client, records, own_topic, extra, deadline, full):
            return
        rows = zip(*(records.column(i) for i in range(records.width)), strict=False)
        topics = records.column(0)
    if own_topic is None and any(t is None for t in topics):
        msg = "a staged record names no topic, and the sink has none now"
        raise ValueError(msg)
    produce = client.produce
    if extra:
        for run in _runs(client, rows, len(records)):
            for topic, partition, key, value, headers in run:
                pairs = [(name, v) for name, v in headers or ()] + extra
                while True:
                    try:
                        produce(topic or own_topic, value, key, partition, headers=pairs)
                        break
                    except BufferError:
                        _wait_for_room(client, deadline, full)
        return
    for run in _runs(client, rows, len(records)):
        for topic, partition, key, value, headers in run:
            while True:
                try:
                    if headers:
                        produce(
                            topic or own_topic,
                            value,
                            key,
                            partition,
                            headers=[tuple(h) for h in headers],
                        )
                    else:
                        produce(topic or own_topic, value, key, partition)
                    break
                except BufferError:
                    _wait_for_room(client, deadline, full)


def _produce_columns(
    client: Any,
    records: StagedColumns,
    own_topic: str | None,
    extra: list[tuple[str, bytes]],
    deadline: float,
    full: Callable[[], BaseException],
) -> bool:
    """Queue records staged as columns, when they have the common shape; whether they had.

    The common shape is one topic (the sink's own, or one named for all), one partition and
    no headers: each record is then its key and value, and no row is made. Records of any
    other shape are left to ``produce_all``'s loop over rows.

    Raises:
        ValueError: the records name no topic, and there is no ``own_topic``.
    """
    constants = records.constants
    topic = constants.get(0, _VARIES)
    if topic is _VARIES or 1 not in constants or constants.get(4, _VARIES) is not None or extra:
        return False
    if topic is None:
        if own_topic is None:
            msg = "a staged record names no topic, and the sink has none now"
            raise ValueError(msg)
        topic = own_topic
    produce, partition = client.produce, constants[1]
    pairs = zip(records.column(2), records.column(3), strict=False)
    for run in _runs(client, pairs, len(records)):
        for key, value in run:
            while True:
                try:
                    produce(topic, value, key, partition)
                    break
                except BufferError:
                    _wait_for_room(client, deadline, full)
    return True


def _runs(client: Any, items: Iterable[Any], n: int) -> Iterator[Iterator[Any]]:
    """The ``n`` items in runs of ``POLL_EVERY``; the client's events served after each run."""
    left = iter(items)
    for _ in range(0, n, POLL_EVERY):
        yield islice(left, POLL_EVERY)
        client.poll(0)


def _wait_for_room(client: Any, deadline: float, full: Callable[[], BaseException]) -> None:
    """The local queue is full: let the client send, briefly, unless the step's time is up."""
    if time.monotonic() > deadline:
        raise full()
    client.poll(_FULL_WAIT_S)
