"""The state contract: ``State``, ``KeyValueState`` and ``StateProvider``.

A state is transactional. Between checkpoints a bolt reads and writes it freely; a checkpoint runs
``prepare_commit(txid)`` on every task and, once all tasks prepared, ``commit(txid)``. A failed
checkpoint runs ``rollback()``, which returns the state to the last committed image.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar


def merge_layers(layers: Iterable[Iterable[tuple[bytes, Any]]]) -> Iterator[tuple[bytes, Any]]:
    """Iterate layered state (pending, prepared, committed): each key once, the first layer wins.

    A ``None`` value is a tombstone: it hides the key in later layers and is never yielded (the
    rule Storm's iterator got wrong before STORM-2449).
    """
    seen: set[bytes] = set()
    for layer in layers:
        for key, value in layer:
            if key in seen:
                continue
            seen.add(key)
            if value is not None:
                yield key, value


class State(ABC):
    """A transactional state, driven by the checkpoint protocol."""

    @property
    def location(self) -> str:
        """Where the state is kept, for people: ``redis 127.0.0.1:6379``, a file's path, ...

        Never a password. The default is the state's class name.
        """
        return type(self).__name__

    @abstractmethod
    def prepare_commit(self, txid: int) -> None:
        """Make everything written so far durable as the prepared image of ``txid``."""

    @abstractmethod
    def commit(self, txid: int | None = None) -> None:
        """Commit the prepared image of ``txid``.

        With no ``txid`` (the checkpoint spout's own save), commit everything written so far at
        once, without a prepare step.
        """

    @abstractmethod
    def rollback(self) -> None:
        """Drop everything since the last commit, prepared or not."""

    def supersede_prepared(self, txid: int) -> None:
        """Begin a new attempt of transaction ``txid``, which a lost attempt may have prepared.

        The Spark runtime calls this on each stateful task's new state before a PREPARE job
        feeds it. A task attempt that prepared and was then lost (its executor died after the
        task finished, or it failed after its prepare) leaves its delta in a durable store; the
        retry, starting from that delta instead of the committed image, would apply the
        transaction twice.

        Call it before the object's first write. Unless a delta of another txid is stored (it
        is left alone, and preparing ``txid`` over it still raises ``StateTransactionError``),
        reads through this object then see the committed image only, and its next
        ``prepare_commit(txid)`` leaves exactly this object's writes prepared, replacing, not
        merging into, any delta stored for ``txid`` by then (another attempt may prepare
        meanwhile).

        The default is ``rollback()``, which drops any stored delta at once. That is right when
        a task has one attempt at a time. Spark may run two attempts of a task at once (a
        resubmitted stage beside a zombie one) and kills the loser at any point, so a shared
        store should override this and drop the old delta in the same atomic step as the new
        prepare, as the Redis and SQLite providers do: otherwise a loser killed between its
        rollback and its prepare leaves the winner's transaction with nothing to commit.
        """
        self.rollback()


class KeyValueState(State):
    """A transactional map.

    Example:
        >>> from providers.memory import InMemoryKeyValueState
        >>> state = InMemoryKeyValueState("demo/counter-0")
        >>> state.put("storm", 1)
        >>> state.get("storm"), state.get("spark", 0)
        (1, 0)
    """

    @abstractmethod
    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value``; ``None`` values are rejected (use ``delete``)."""

    @abstractmethod
    def get(self, key: Any, default: Any = None) -> Any:
        """Return the value of ``key``, or ``default`` when it is absent."""

    @abstractmethod
    def delete(self, key: Any) -> Any:
        """Remove ``key`` and return the value it had (``None`` when it was absent)."""

    def get_many(self, keys: Iterable[Any], default: Any = None) -> list[Any]:
        """``get`` of each key, in order; a store may read them all in one round trip."""
        return [self.get(key, default) for key in keys]

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """Yield ``(key, value)`` for every live key once, deleted keys hidden."""

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Same as iterating the state."""
        return iter(self)


class StateProvider(ABC):
    """Makes states. Looked up by dotted name from ``topology.state.provider``."""

    @abstractmethod
    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> State:
        """Return the state of ``namespace``: its committed data and any pending prepare."""

    def namespaces(self, conf: Mapping[str, Any], prefix: str = "") -> list[str] | None:
        """The namespaces starting with ``prefix`` that hold state, sorted; ``None`` if unknown.

        A namespace holds state once a state of it prepared, committed (with or without a txid)
        or rolled back: from then on the store keeps its transaction record, even when the map
        itself is empty. Merely reading a namespace does not count. Tools use this to find what
        a topology left behind (``recovery.checkpoint_status``).

        The default returns ``None``: this provider cannot list. Override it when the store can
        enumerate its namespaces.
        """
        return None


class DriverOwnedStateProvider(StateProvider):
    """A provider whose data lives in the driver process for the life of the run.

    Tasks run in other processes, so the runtime ships each task the image of its namespace
    before the task runs (``export_image`` on the driver, ``import_image`` in the task) and brings
    back what the task's state did to it (``take_changes`` in the task, ``apply_changes`` on the
    driver) once the whole transaction has succeeded. Providers backed by a shared store (Redis,
    a file) do not implement this: their tasks talk to the store directly.
    """

    driver_owned: ClassVar[bool] = True

    @abstractmethod
    def export_image(self, namespace: str) -> bytes:
        """Serialize the committed and prepared image of ``namespace`` (driver side)."""

    @abstractmethod
    def import_image(self, namespace: str, image: bytes) -> None:
        """Install a shipped image so that ``new_state(namespace)`` sees it (task side)."""

    @abstractmethod
    def take_changes(self, namespace: str) -> bytes | None:
        """Return and forget what states of ``namespace`` did to the image (task side)."""

    @abstractmethod
    def apply_changes(self, namespace: str, changes: bytes) -> None:
        """Replay changes taken in a task onto the driver's image (driver side)."""

    def begin_task(self, root: str, images: Mapping[str, bytes]) -> None:
        """Task side: install ``images``, the state under ``root`` this task may use.

        "Under ``root``" is ``root`` itself and every namespace below it (``root/...``). A task
        process is reused: what an earlier task left under ``root`` is not this task's to read.
        A provider that can should forget it and record the changes of every namespace under
        ``root``, shipped or new (see ``end_task``); the default installs the images.
        """
        for namespace, image in images.items():
            self.import_image(namespace, image)

    def end_task(self, root: str, shipped: Iterable[str] = ()) -> dict[str, bytes]:
        """Task side: the change log of every namespace under ``root`` that changed.

        The default asks ``take_changes`` of the namespaces that were shipped.
        """
        taken = {ns: self.take_changes(ns) for ns in shipped if under(ns, root)}
        return {ns: changes for ns, changes in taken.items() if changes is not None}


def under(namespace: str, root: str) -> bool:
    """Whether ``namespace`` is ``root`` or below it (``root/...``)."""
    return namespace == root or namespace.startswith(root + "/")
