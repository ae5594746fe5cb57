"""The transactional word count the recovery tests kill, and how those tests see inside it.

``python -m statefulbolts.cli run tests.tx_streams_topologies:from_env --conf FILE --json``
runs, in a child driver, a word count over Redis streams (one stream per partition, entries
``{"seq": "<partition>:<index>", "word": ...}``)::

    spout (Redis Streams, 2 tasks) -> split (processing phase, 2 tasks)
                                   -> count (committer, fields grouping on the word, 2 tasks)

The topology's parameters (``Params``) come as JSON in the environment variable ``ENV``: a
topology function takes no arguments, and the transactional id, which the builder needs, is not
a config key. ``split`` and ``count`` are batch bolts, a fresh object per (task, attempt) in a
Spark worker, so they report through a JSON-lines file (``Params.log``): ``split`` logs the
``seq`` of every entry of its batch when the batch finishes, ``count`` the words it applied
after its map update. Every line is one ``write`` on an ``O_APPEND`` descriptor, so the lines of
concurrent workers never interleave.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from examples.corpus import sentence, words
from statefulbolts import (
    BaseTransactionalBolt,
    Committer,
    Fields,
    OpaqueMap,
    TransactionalMap,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)
from statefulbolts.transactional import (
    OpaqueRedisStreamsTransactionalSpout,
    RedisStreamsTransactionalSpout,
    load_streams,
)

ENV = "STATEFULBOLTS_TX_CRASH"
TOPOLOGY = "tests.tx_streams_topologies:from_env"
PARALLELISM = 2


@dataclass(frozen=True)
class Params:
    """What ``from_env`` builds: the id, the streams, the spout kind, the log file."""

    transactional_id: str
    url: str
    streams: tuple[str, ...]
    log: str
    opaque: bool = False
    take_per_batch: int = 4

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with ``ENV`` set to these params."""
        env = dict(os.environ if base is None else base)
        env[ENV] = json.dumps(asdict(self))
        return env

    def with_log(self, log: str | os.PathLike[str]) -> Params:
        """The same topology, logging to ``log``."""
        return Params(**{**asdict(self), "log": str(log)})


def _append(path: str, event: dict[str, Any]) -> None:
    line = (json.dumps(event) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class LoggedSplit(BaseTransactionalBolt):
    """``(attempt, seq, word) -> (attempt, word)``; logs its batch's seqs at ``finish_batch``."""

    def __init__(self, log: str) -> None:
        self.log = log

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.task = context.this_task_index
        self.seqs: list[str] = []
        _append(self.log, self._event("prepare"))

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.seqs.append(tuple.get_value(1))
        self.collector.emit([self.attempt, tuple.get_value(2)])

    def finish_batch(self) -> None:
        _append(self.log, {**self._event("batch"), "seqs": self.seqs})

    def _event(self, kind: str) -> dict[str, Any]:
        return {
            "kind": kind,
            "component": "split",
            "task": self.task,
            "txid": self.attempt.transaction_id,
            "attempt": str(self.attempt),
            "pid": os.getpid(),
        }

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word"))


class WordCounter(BaseTransactionalBolt, Committer):
    """Counts its batch's words into a ``TransactionalMap`` (``opaque``: an ``OpaqueMap``)."""

    def __init__(self, log: str, opaque: bool = False) -> None:
        self.log, self.opaque = log, opaque

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.attempt = id
        self.task = context.this_task_index
        self.counts: collections.Counter[str] = collections.Counter()
        backing = context.backing_map()
        self.map = OpaqueMap(backing) if self.opaque else TransactionalMap(backing)
        _append(self.log, self._event("prepare"))

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts[tuple.get_value(1)] += 1

    def finish_batch(self) -> None:
        keys = sorted(self.counts)
        self.map.multi_update(
            self.attempt, keys, [lambda old, n=self.counts[k]: (old or 0) + n for k in keys]
        )
        # Logged after the write: a "commit" line means this task's map holds the txid.
        _append(self.log, {**self._event("commit"), "counts": dict(self.counts)})

    def _event(self, kind: str) -> dict[str, Any]:
        return {
            "kind": kind,
            "component": "count",
            "task": self.task,
            "txid": self.attempt.transaction_id,
            "attempt": str(self.attempt),
            "pid": os.getpid(),
        }

    def declare_output_fields(self, declarer: Any) -> None:
        """Emits nothing."""


def build(params: Params) -> TransactionalTopology:
    """The word count of ``params`` (see the module docstring)."""
    kind = OpaqueRedisStreamsTransactionalSpout if params.opaque else RedisStreamsTransactionalSpout
    spout = kind(params.url, list(params.streams), ["seq", "word"], params.take_per_batch)
    builder = TransactionalTopologyBuilder(params.transactional_id, "spout", spout, PARALLELISM)
    builder.set_bolt("split", LoggedSplit(params.log), PARALLELISM).shuffle_grouping("spout")
    builder.set_committer_bolt(
        "count", WordCounter(params.log, params.opaque), PARALLELISM
    ).fields_grouping("split", Fields("word"))
    return builder.build_topology()


def from_env() -> TransactionalTopology:
    """What the child driver runs: ``build`` with the ``Params`` in ``$STATEFULBOLTS_TX_CRASH``."""
    raw = os.environ.get(ENV)
    if not raw:
        msg = f"set {ENV} to the JSON of tests.tx_streams_topologies.Params"
        raise RuntimeError(msg)
    data = json.loads(raw)
    return build(Params(**{**data, "streams": tuple(data["streams"])}))


# --------------------------------------------------------------------------- data and logs
def stream_words(streams: Iterable[str], per_stream: int) -> dict[str, list[str]]:
    """``per_stream`` words of the corpus for each stream, a different stretch for each."""
    found: dict[str, list[str]] = {}
    for p, stream in enumerate(streams):
        corpus = [w for i in range(p * 7, p * 7 + per_stream) for w in words(sentence(i))]
        found[stream] = corpus[:per_stream]
    return found


def load(url: str, data: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """``XADD`` the words with their seqs; returns each stream's entry ids."""
    entries = {
        stream: [{"seq": f"{p}:{j}", "word": w} for j, w in enumerate(ws)]
        for p, (stream, ws) in enumerate(data.items())
    }
    return load_streams(url, entries)


def expected(data: Mapping[str, list[str]]) -> dict[str, int]:
    """The plain word count."""
    return dict(collections.Counter(w for ws in data.values() for w in ws))


def read_log(path: str | os.PathLike[str], **match: Any) -> list[dict[str, Any]]:
    """The log's events whose fields equal ``match``, in the order they were written."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    found = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [e for e in found if all(e.get(k) == v for k, v in match.items())]


def batches(path: str | os.PathLike[str]) -> dict[str, dict[int, list[str]]]:
    """Per attempt (``"txid:id"``), per split task, the seqs the task got, from the log."""
    found: dict[str, dict[int, list[str]]] = collections.defaultdict(dict)
    for event in read_log(path, kind="batch"):
        found[event["attempt"]][event["task"]] = event["seqs"]
    return dict(found)


def complete_batches(path: str | os.PathLike[str]) -> dict[int, list[str]]:
    """Per txid, the sorted seqs of its attempts that every split task finished (the last one)."""
    found: dict[int, list[str]] = {}
    for attempt, tasks in batches(path).items():
        if len(tasks) == PARALLELISM:
            found[int(attempt.split(":")[0])] = sorted(s for seqs in tasks.values() for s in seqs)
    return found
