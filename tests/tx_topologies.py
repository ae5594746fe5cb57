"""Bolts and spouts for the transactional Spark tests, and how those tests observe them.

Bolt objects live in Spark's Python workers, one per (task, attempt), so they report through
files: every ``Log`` line is one JSON event appended to a file under the test's ``tmp_path``
(appends of one short line are atomic on Linux), read back by the test with ``events``.
Failures are injected deterministically: ``FailOnce`` fails the first attempt of the chosen
txids in one task only (an exclusive marker file decides which attempt is first, whatever
process runs it).
"""

from __future__ import annotations

import collections
import json
import os
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from statefulbolts import (
    BaseTransactionalBolt,
    BasicBolt,
    Committer,
    Fields,
    OpaqueMap,
    TransactionalMap,
)
from statefulbolts.errors import FailedException


class Log:
    """Appends JSON events to ``<folder>/events.jsonl``."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = str(folder)

    def write(self, **event: Any) -> None:
        event["t"] = time.monotonic()
        event["pid"] = os.getpid()
        with open(os.path.join(self.folder, "events.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(event, default=str) + "\n")


def events(folder: str | Path, **match: Any) -> list[dict[str, Any]]:
    """Every event logged under ``folder`` whose fields equal ``match``, in log order."""
    path = Path(folder) / "events.jsonl"
    if not path.exists():
        return []
    found = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [e for e in found if all(e.get(k) == v for k, v in match.items())]


class FailOnce:
    """Raises ``FailedException`` on the first attempt of ``txids`` (per ``where``), once."""

    def __init__(self, folder: str | Path, txids: Iterable[int]) -> None:
        self.folder, self.txids = str(folder), frozenset(txids)

    def maybe(self, where: str, txid: int) -> None:
        if txid not in self.txids:
            return
        marker = os.path.join(self.folder, f"failed-{where}-{txid}")
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return
        os.close(fd)
        msg = f"injected failure in {where}, txid {txid}"
        raise FailedException(msg)


class RandomFailures:
    """Raises ``FailedException`` with probability ``p`` per (where, attempt), seeded.

    At most ``per_txid`` failures of one txid in one place, so every batch gets through.
    """

    def __init__(self, folder: str | Path, seed: int, p: float, per_txid: int = 2) -> None:
        self.folder, self.seed, self.p, self.per_txid = str(folder), seed, p, per_txid

    def maybe(self, where: str, attempt: Any) -> None:
        draw = random.Random(f"{self.seed}/{where}/{attempt}").random()
        if draw >= self.p:
            return
        for n in range(self.per_txid):
            marker = os.path.join(self.folder, f"random-{where}-{attempt.transaction_id}-{n}")
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                continue
            os.close(fd)
            msg = f"random failure in {where}, attempt {attempt}"
            raise FailedException(msg)


class Recorder(BaseTransactionalBolt):
    """Counts its tuples per batch, logs prepare / finish, and passes on a per-key count.

    ``emit``: in ``finish_batch``, one tuple ``(attempt, key, n)`` per key seen (the key is
    field ``key_field`` of the input), or ``(attempt, n)`` when ``key_field`` is None.
    """

    def __init__(
        self,
        log: Log,
        key_field: int | None = 1,
        fail: Any = None,
        sleep: float = 0.0,
        emit: bool = True,
    ) -> None:
        self.log, self.key_field, self.fail, self.sleep, self.emits = (
            log,
            key_field,
            fail,
            sleep,
            emit,
        )

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.where = f"{context.this_component_id}-{context.this_task_index}"
        self.component, self.task = context.this_component_id, context.this_task_index
        self.counts: collections.Counter[Any] = collections.Counter()
        self.n = 0
        self.log.write(
            kind="prepare",
            component=self.component,
            task=self.task,
            attempt=str(id),
            txid=id.transaction_id,
        )

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.n += 1
        if self.key_field is not None:
            self.counts[tuple.get_value(self.key_field)] += tuple.get_value(-1)

    def finish_batch(self) -> None:
        if self.sleep:
            time.sleep(self.sleep)
        # Logged before a failure may be injected: a failed attempt's batch is seen too.
        self.log.write(
            kind="finish",
            component=self.component,
            task=self.task,
            attempt=str(self.attempt),
            txid=self.attempt.transaction_id,
            n=self.n,
            counts=dict(self.counts),
        )
        if self.fail is not None:
            self.fail.maybe(self.where, self.attempt.transaction_id)
        if not self.emits:
            return
        if self.key_field is None:
            self.collector.emit([self.attempt, self.n])
        else:
            for key, n in sorted(self.counts.items()):
                self.collector.emit([self.attempt, key, n])

    def declare_output_fields(self, declarer: Any) -> None:
        fields = ("id", "n") if self.key_field is None else ("id", "key", "n")
        declarer.declare(Fields(*fields))


class CountCommitter(Recorder, Committer):
    """A committer: applies its batch's per-key counts to its map (``opaque``: an OpaqueMap)."""

    def __init__(self, log: Log, fail: Any = None, opaque: bool = False, **kw: Any) -> None:
        super().__init__(log, fail=fail, **kw)
        self.opaque = opaque

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        super().prepare(conf, context, collector, id)
        backing = context.backing_map()
        self.map = OpaqueMap(backing) if self.opaque else TransactionalMap(backing)

    def finish_batch(self) -> None:
        keys = sorted(self.counts)
        updaters = [lambda old, n=self.counts[k]: (old or 0) + n for k in keys]
        self.map.multi_update(self.attempt, keys, updaters)
        super().finish_batch()


class Ones(BasicBolt):
    """``(attempt, word)`` -> ``(attempt, word, 1)``; the identity bolt of Storm's test."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit([tuple.get_value(0), tuple.get_value(1), 1])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "n"))


class NoAttempt(BasicBolt):
    """Emits a tuple without the attempt first: the runtime must refuse it."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        collector.emit(["oops", tuple.get_value(1), 1])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "n"))


def words_data(partitions: Sequence[str]) -> dict[int, list[list[Any]]]:
    """Memory-spout partitions from space-separated words."""
    return {p: [[w] for w in text.split()] for p, text in enumerate(partitions)}


def total(data: Mapping[int, list[list[Any]]]) -> dict[str, int]:
    """The plain word count of memory-spout data."""
    return dict(collections.Counter(row[0] for rows in data.values() for row in rows))
