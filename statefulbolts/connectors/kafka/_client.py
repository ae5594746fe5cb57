"""The Kafka spout's clients: one admin client in the driver, a consumer per read in a task.

In the driver, ``Cluster`` (one per spout object, made on first use, never pickled) answers
what the driver asks before each transaction, each a single request over every partition:
the topics and their partitions (``topics``), the earliest, end and log-end offsets
(``offsets``), the offsets at a timestamp or a group's committed offsets (first starts), and
commits the checkpoint's offsets to the group (``commit``, without waiting: a failure is a
warning, never the driver's crash).

In a worker, each read makes a consumer and closes it after (``consumer``). A consumer never
subscribes and never commits: it is assigned one partition at an exact offset.

Errors become the project's (``broker_error``): a broker away or slow (a transport failure, a
timeout, no leader yet) is ``KafkaUnavailableError``, an outage the driver waits out; a refusal
(authentication, authorization) is ``KafkaRefusedError``, which stops the topology; the cause,
what was being done and the brokers are named.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from statefulbolts.connectors.kafka._config import (
    BOOTSTRAP_KEY,
    TIMEOUT_KEY,
    KafkaRefusedError,
    KafkaUnavailableError,
    require_kafka,
)

__all__ = [
    "Cluster",
    "Offsets",
    "broker_error",
    "consumer",
]

log = logging.getLogger(__name__)

# librdkafka's error names for a broker that refused rather than failed.
_REFUSALS = frozenset(
    {
        "_AUTHENTICATION",
        "SASL_AUTHENTICATION_FAILED",
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "UNSUPPORTED_SASL_MECHANISM",
        "ILLEGAL_SASL_STATE",
        "_SSL",
        "UNSUPPORTED_VERSION",
        "_UNSUPPORTED_FEATURE",
    }
)


def error_name(exc: BaseException) -> str | None:
    """Librdkafka's name for the error ``exc`` carries (``"_TRANSPORT"``), if it carries one."""
    error = exc.args[0] if exc.args else None
    name = getattr(error, "name", None)
    return name() if callable(name) else None


def broker_error(
    exc: BaseException, *, step: str, subject: str, bootstrap: str
) -> KafkaUnavailableError | KafkaRefusedError:
    """``exc`` (from confluent-kafka, or a timeout) as an outage or a refusal, to raise from it.

    Args:
        exc: what the client raised.
        step: what was being done (``"listing offsets"``).
        subject: what it was done to, naming the spout (``"topic 'clicks' (KafkaSpout)"``).
        bootstrap: the brokers it was asked of.
    """
    name = error_name(exc)
    cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if name in _REFUSALS:
        msg = (
            f"{step} {subject}: the Kafka cluster at {bootstrap} refused: {cause}; check the "
            "credentials and permissions in the kafka.* client settings"
        )
        return KafkaRefusedError(msg)
    msg = (
        f"{step} {subject}: the Kafka cluster at {bootstrap} did not answer: {cause}; it is "
        f"waited for (topology.state.backend.timeout.secs); check {BOOTSTRAP_KEY!r} and that "
        f"the brokers are up, or raise {TIMEOUT_KEY!r} for a slow cluster"
    )
    return KafkaUnavailableError(msg)


@contextlib.contextmanager
def raising_broker_errors(*, step: str, subject: str, bootstrap: str) -> Iterator[None]:
    """Raise what the client raises in the block as ``broker_error`` words it."""
    kafka = require_kafka("KafkaSpout")
    try:
        yield
    except (kafka.KafkaException, concurrent.futures.TimeoutError) as exc:
        raise broker_error(exc, step=step, subject=subject, bootstrap=bootstrap) from exc


class Offsets(NamedTuple):
    """One partition's offsets now: its first, its readable end and its log end.

    ``end`` is where a reader at the spout's isolation level stops (read_committed: the last
    stable offset, before any open transaction); ``high`` is the log end (the high watermark),
    past which no offset exists.
    """

    low: int
    end: int
    high: int


class Cluster:
    """The driver's one admin client for a spout (see the module docstring).

    Args:
        settings: the client settings (``bootstrap.servers`` and the ``kafka.*`` pass-through).
        timeout_s: how long a request may take.
        who: the spout, for messages.
    """

    def __init__(self, settings: Mapping[str, Any], timeout_s: float, who: str) -> None:
        kafka = require_kafka(who)
        from confluent_kafka.admin import AdminClient

        self._kafka = kafka
        self.settings = dict(settings)
        self.bootstrap = str(settings.get("bootstrap.servers"))
        self.timeout_s = timeout_s
        self.who = who
        self.admin = AdminClient(self.settings)

    def _errors(self, step: str, subject: str) -> contextlib.AbstractContextManager[None]:
        return raising_broker_errors(
            step=step, subject=f"{subject} ({self.who})", bootstrap=self.bootstrap
        )

    def topics(self) -> dict[str, int]:
        """Every topic of the cluster and its number of partitions.

        Lists all topics rather than naming some: asking for one by name makes a broker that
        creates topics on demand create it.
        """
        with self._errors("listing topics", "of the cluster"):
            metadata = self.admin.list_topics(timeout=self.timeout_s)
        out = {}
        for name, topic in metadata.topics.items():
            if topic.error is not None and topic.error.name() != "UNKNOWN_TOPIC_OR_PART":
                # A topic just made may have no leader yet: its partitions come next time.
                log.info("%s: topic %r not ready: %s", self.who, name, topic.error.str())
                continue
            if topic.error is None and topic.partitions:
                out[name] = len(topic.partitions)
        return out

    def _list(self, specs: Mapping[Any, Any], isolation: str, step: str) -> dict[Any, int]:
        """``list_offsets`` of every partition of ``specs`` at once: partition -> offset."""
        from confluent_kafka import IsolationLevel

        level = (
            IsolationLevel.READ_COMMITTED
            if isolation == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )
        if not specs:
            return {}
        with self._errors(step, f"of {len(specs)} partitions"):
            futures = self.admin.list_offsets(
                dict(specs), isolation_level=level, request_timeout=self.timeout_s
            )
            return {
                (tp.topic, tp.partition): f.result(timeout=self.timeout_s).offset
                for tp, f in futures.items()
            }

    def offsets(self, partitions: Sequence[tuple[str, int]], isolation: str) -> dict[Any, Offsets]:
        """Each partition's ``Offsets`` now (three requests, each over every partition)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        def specs(spec: Any) -> dict[Any, Any]:
            return {TopicPartition(t, p): spec for t, p in partitions}

        low = self._list(specs(OffsetSpec.earliest()), "read_uncommitted", "listing first offsets")
        high = self._list(specs(OffsetSpec.latest()), "read_uncommitted", "listing end offsets")
        end = (
            self._list(specs(OffsetSpec.latest()), isolation, "listing stable offsets")
            if isolation == "read_committed"
            else high
        )
        return {tp: Offsets(low[tp], end[tp], high[tp]) for tp in low}

    def at_time(self, partitions: Sequence[tuple[str, int]], ms: int) -> dict[Any, int | None]:
        """Per partition, the first offset whose record's timestamp is ``ms`` or later.

        ``None``: no such record (the partition's end is where such a record would go).
        """
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        found = self._list(
            {TopicPartition(t, p): OffsetSpec.for_timestamp(ms) for t, p in partitions},
            "read_uncommitted",
            f"looking up offsets at timestamp {ms}",
        )
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}

    def group_offsets(
        self, group: str, partitions: Sequence[tuple[str, int]]
    ) -> dict[Any, int | None]:
        """Per partition, ``group``'s committed offset (``None``: it has none)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in partitions])
        with self._errors("reading committed offsets", f"of group {group!r}"):
            [future] = self.admin.list_consumer_group_offsets(
                [request], request_timeout=self.timeout_s
            ).values()
            result = future.result(timeout=self.timeout_s)
        return {
            (tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None)
            for tp in result.topic_partitions
        }

    def commit(self, group: str, offsets: Mapping[Any, int]) -> None:
        """Commit ``offsets`` to ``group``, without waiting; a failure is logged as a warning.

        For monitoring tools only: nothing reads them back. A group with members of its own
        (another consumer subscribed under the same id) refuses; so does a broker away. The
        next checkpoint commits again, so one lost commit costs nothing.
        """
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if not offsets:
            return
        parts = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        try:
            [future] = self.admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, parts)], request_timeout=self.timeout_s
            ).values()
        except (self._kafka.KafkaException, ValueError) as exc:
            log.warning("%s: committing offsets to group %r failed: %s", self.who, group, exc)
            return

        def done(f: concurrent.futures.Future[Any]) -> None:
            exc = f.exception()
            if exc is not None:
                log.warning(
                    "%s: committing offsets to group %r failed (the checkpoint holds them; "
                    "monitoring tools see the group behind until the next commit): %s",
                    self.who,
                    group,
                    exc,
                )

        future.add_done_callback(done)


# ------------------------------------------------------------------ the workers' consumers
@contextlib.contextmanager
def consumer(settings: Mapping[str, Any], who: str) -> Iterator[Any]:
    """A consumer for one read, closed after it.

    Not pooled: an idle consumer that once read a topic keeps following its metadata, and
    librdkafka 2.16 was seen to crash its process when such a topic was deleted (on the test
    broker); a consumer per read is made in a few milliseconds on a near broker.
    """
    kafka = require_kafka(who)
    made = kafka.Consumer(dict(settings))
    try:
        yield made
    finally:
        made.close()
