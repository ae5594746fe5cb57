"""The state contract: ``State``, ``KeyValueState`` and ``StateProvider``.

A state is transactional. Between checkpoints a bolt reads and writes it freely; a checkpoint runs
``prepare_commit(txid)`` on every task and, once all tasks prepared, ``commit(txid)``. A failed
checkpoint runs ``rollback()``, which returns the state to the last committed image.

Beside the contract bolts use, a ``KeyValueState`` may expose its namespace's *stored image*, for
tools that read or move state offline (``statefulbolts.state``): the committed map and the
prepared delta as the store holds them (encoded keys, value payloads, tombstones), their txids,
and one call that replaces the whole image. See "The stored image" in ``KeyValueState``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import (
    Callable,
    Collection,
    Hashable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any, ClassVar

from providers._lease import LeaseStore
from providers._ttl import StateTtl
from providers.errors import ProviderConfigError


def updated(keys: Sequence[Any], new: Sequence[Any]) -> Sequence[Any]:
    """``new``, what an ``update_many`` update returned, once it is one value per key."""
    if len(new) != len(keys):
        msg = f"update_many's update returned {len(new)} values for {len(keys)} keys"
        raise ValueError(msg)
    return new


def merge_layers(layers: Iterable[Iterable[tuple[bytes, Any]]]) -> Iterator[tuple[bytes, Any]]:
    """Iterate layered state (pending, prepared, committed): each key once, the first layer wins.

    A ``None`` value is a tombstone: it hides the key in later layers and is never yielded (the
    rule Storm's iterator got wrong before STORM-2449).

    Only the keys of the layers above the last are remembered, so iterating a committed map of
    millions of keys under a small delta holds the delta's keys, not the map's; the last layer
    must therefore not repeat a key (a map never does).
    """
    stack = list(layers)
    if not stack:
        return
    seen: set[bytes] = set()
    for layer in stack[:-1]:
        for key, value in layer:
            if key in seen:
                continue
            seen.add(key)
            if value is not None:
                yield key, value
    for key, value in stack[-1]:
        if value is not None and key not in seen:
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

    def fence(self, epoch: int) -> None:
        """Carry the driver's lease ``epoch`` with every write of this object from now on.

        Part of the lease protocol (``providers._lease``), for a state whose provider has a
        ``lease_store``: each write step (``prepare_commit``, ``commit`` with or without a txid,
        ``rollback``, ``replace_stored``) compares ``epoch`` with its namespace's fence in the
        same atomic step as the write; an older epoch is refused with ``StateFencedError`` and
        writes nothing, a newer one raises the fence. ``StateFactory`` calls this on every state
        it makes when the config holds ``FENCE_EPOCH_KEY``.

        The default refuses: a provider that hands out leases must fence its writes too.

        Raises:
            NotImplementedError: this state cannot carry an epoch.
        """
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        msg = (
            f"{kind} cannot fence its writes (State.fence), so its provider must not hand out "
            "leases (StateProvider.lease_store); see providers._lease"
        )
        raise NotImplementedError(msg)

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

    The stored image (optional; the built-in providers have it). For tools that read or move a
    namespace whole while no topology uses it (``statefulbolts.state``: dump, export, import),
    a state may expose what its store holds, below this object's own pending writes:

    - ``stored_txids()``: the committed and the prepared txid, read from the store now;
    - ``scan_committed()``: the committed map as ``(encoded key, payload)`` pairs, streamed in
      pages (constant memory);
    - ``scan_prepared()``: the prepared delta as ``(encoded key, payload or None)`` pairs, a
      ``None`` payload being a tombstone (the key is deleted by the prepared transaction);
    - ``decode_key`` / ``decode_value``: the key and value serializers' ``deserialize``;
    - ``get_committed(key)``: one key's committed value, whatever is prepared;
    - ``replace_stored(...)``: replace the namespace's whole image (committed map, prepared
      delta, both txids) in one step, as if the store had always held it; the rollback count
      is reset, so nothing may use a state object of the namespace made before the call.

    "Encoded key" and "payload" are the key and value serializers' bytes, the same in every
    provider (the Redis envelope is the Redis provider's own), so an image read from one
    provider can be written into another configured with the same serializers. The default of
    each method raises ``NotImplementedError``; ``supports_stored_image`` says whether a state
    has them all.

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

    def put_many(self, items: Iterable[tuple[Any, Any]]) -> None:
        """``put`` of each ``(key, value)``, in order; a store may make it cheaper than the loop.

        What the state holds afterwards, and the order of first writes that iteration and a
        prepare keep, are those of the ``put`` calls one after another; a pair ``put`` refuses
        raises as ``put`` does, with the pairs before it written and those after it not.
        For a bolt that works out many new values at once (``StatefulBolt.execute_batch``).

        Example:
            >>> from providers.memory import InMemoryKeyValueState
            >>> state = InMemoryKeyValueState("demo/counter-0")
            >>> state.put_many([("storm", 1), ("spark", 2), ("storm", 3)])
            >>> state.get_many(["storm", "spark"])
            [3, 2]
        """
        put = self.put
        for key, value in items:
            put(key, value)

    def update_many(
        self, keys: Iterable[Any], update: Callable[[list[Any]], Sequence[Any]]
    ) -> None:
        """Give ``update`` the value of each key (``None`` where absent); ``put`` what it returns.

        ``update`` returns one value per key, in order; ``None`` leaves that key as it is. What
        the state holds afterwards is what ``get_many``, then ``put_many`` of the other pairs,
        leave (a value ``put`` refuses raises as ``put`` does, with the pairs before it
        written); an exception out of ``update`` writes nothing. A store may do it in fewer
        steps: a layered state that wrote nothing yet encodes each key once for both. For a
        read-modify-write of many keys (a transactional committer's map).

        Example:
            >>> from providers.memory import InMemoryKeyValueState
            >>> state = InMemoryKeyValueState("demo/counter-0")
            >>> state.put("storm", 1)
            >>> state.update_many(["storm", "spark"], lambda old: [(n or 0) + 1 for n in old])
            >>> state.get_many(["storm", "spark"])
            [2, 1]
        """
        keys = list(keys)
        new = updated(keys, update(self.get_many(keys)))
        self.put_many(pair for pair in zip(keys, new, strict=True) if pair[1] is not None)

    def prefetch(self, keys: Iterable[Any]) -> None:
        """A hint: ``get`` of many of ``keys`` is likely to follow, so read them ahead, together.

        It changes nothing any read returns, only what reads cost: a store a round trip away may
        fetch the committed values of all ``keys`` at once and answer the ``get`` calls that
        follow from memory, as if each had been read singly (a key never asked for after
        costs nothing more). The runtime calls it before a stateful task's tuples, with the
        distinct values of the field its input is grouped on.

        ``keys`` may be lazy and long. The default does nothing and does not iterate it, so a
        state whose reads are local pays nothing for the hint.
        """
        return None  # a hint: ignoring it is always correct

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """Yield ``(key, value)`` for every live key once, deleted keys hidden."""

    def items(self) -> Iterator[tuple[Any, Any]]:
        """Same as iterating the state."""
        return iter(self)

    def iter_keys(self) -> Iterator[Any]:
        """Yield every live key once: the keys iterating the state yields, in the same order.

        For callers that need the keys alone (to find what to delete, say). The default takes
        them from ``iter(self)``; a provider whose values cost something to decode overrides
        it to skip them (the built-in providers do).
        """
        return (key for key, _ in self)

    # -- time to live (optional; the rules are in ``providers._ttl``)
    @property
    def supports_ttl(self) -> bool:
        """Whether this state keeps expiries (``set_transaction_time`` takes a ``ttl``)."""
        return False

    def set_transaction_time(self, now_ms: int | None, ttl: StateTtl | None = None) -> None:
        """Judge expiry at ``now_ms`` (the transaction's timestamp) and write under ``ttl``.

        The checkpoint protocol calls it on a task's state before the bolt's first read:
        from then on reads hide every key expired at ``now_ms``, and the next
        ``prepare_commit`` gives what this object wrote the expiry ``now_ms + ttl`` (no
        expiry without a ``ttl``) and stores ``now_ms`` with the prepare, for the commit's
        cleanup. ``None`` judges nothing (a state used outside a transaction).

        The default keeps no expiries: it accepts no ``ttl``.

        Raises:
            ProviderConfigError: ``ttl`` is given and this state keeps no expiries.
        """
        if ttl is not None:
            kind = f"{type(self).__module__}.{type(self).__qualname__}"
            msg = (
                f"state {getattr(self, 'namespace', '?')!r}: {kind} keeps no expiries, so it "
                "cannot honour topology.state.ttl.secs; remove the key for this component, or "
                "use a provider with TTL (memory, Redis, SQLite)"
            )
            raise ProviderConfigError(msg)

    def scan_expiries(self) -> Iterator[tuple[bytes, int]]:
        """``(encoded key, expiry ms)`` of each committed key that has an expiry, streamed.

        Part of the stored image for tools; expired keys not yet cleaned up are included. The
        default, for a state that keeps no expiries, yields nothing.
        """
        return iter(())

    def committed_time(self) -> int | None:
        """The timestamp of the last committed transaction that had one, as stored now.

        Offline readers judge expiry at it (``statefulbolts.state.read_state``). The default,
        for a state that keeps no expiries, is ``None``.
        """
        return None

    # -- the stored image (optional, see the class docstring)
    def stored_txids(self) -> tuple[int | None, int | None]:
        """``(committed txid, prepared txid)`` as the store holds them now (``None``: none)."""
        raise NotImplementedError(_no_stored_image(self, "stored_txids"))

    def scan_committed(self) -> Iterator[tuple[bytes, bytes]]:
        """The stored committed map, ``(encoded key, payload)`` per key, streamed."""
        raise NotImplementedError(_no_stored_image(self, "scan_committed"))

    def scan_prepared(self) -> Iterator[tuple[bytes, bytes | None]]:
        """The stored prepared delta, ``(encoded key, payload or None for a deletion)``."""
        raise NotImplementedError(_no_stored_image(self, "scan_prepared"))

    def decode_key(self, encoded: bytes) -> Any:
        """A key as ``scan_committed`` / ``scan_prepared`` give it, decoded."""
        raise NotImplementedError(_no_stored_image(self, "decode_key"))

    def decode_value(self, payload: bytes) -> Any:
        """A payload as ``scan_committed`` / ``scan_prepared`` give it, decoded."""
        raise NotImplementedError(_no_stored_image(self, "decode_value"))

    def get_committed(self, key: Any, default: Any = None) -> Any:
        """The committed value of ``key`` (``default`` when absent), ignoring anything prepared."""
        raise NotImplementedError(_no_stored_image(self, "get_committed"))

    def stored_fence(self) -> int | None:
        """The highest lease epoch that wrote this namespace, as stored now (``None``: none).

        Lets a message say which driver wrote what a namespace holds. Optional (not part of
        ``supports_stored_image``); the default does not know.
        """
        return None

    def replace_stored(
        self,
        committed_txid: int | None,
        committed: Iterable[tuple[bytes, bytes]],
        prepared_txid: int | None,
        prepared: Mapping[bytes, bytes | None],
        *,
        expiries: Iterable[tuple[bytes, int]] = (),
        committed_time: int | None = None,
    ) -> None:
        """Replace everything stored for this namespace, in one step.

        Afterwards the store holds exactly ``committed`` (streamed once, in order; a key given
        twice keeps its last payload) with ``committed_txid``, and the prepared delta
        ``prepared`` (``None`` payloads are tombstones) with ``prepared_txid``; the rollback
        count starts again from zero, and this object's pending writes are dropped. With both
        txids ``None`` and nothing given, the namespace holds nothing any more
        (``StateProvider.namespaces`` no longer lists it). ``expiries`` (``scan_expiries``'s
        pairs; a key not in ``committed`` is skipped) and ``committed_time``
        (``committed_time()``) carry the time to live over; a state that keeps no expiries
        ignores them.

        For offline tools: no other state object of the namespace may be in use.

        Raises:
            StateTransactionError: ``prepared`` holds entries but ``prepared_txid`` is ``None``.
            StateBackendError: the store failed; what was there before is still there.
        """
        raise NotImplementedError(_no_stored_image(self, "replace_stored"))

    @property
    def supports_stored_image(self) -> bool:
        """Whether this state implements every method of the stored image."""
        return all(
            getattr(type(self), name) is not getattr(KeyValueState, name)
            for name in _STORED_IMAGE_METHODS
        )


_STORED_IMAGE_METHODS = (
    "stored_txids",
    "scan_committed",
    "scan_prepared",
    "decode_key",
    "decode_value",
    "get_committed",
    "replace_stored",
)


def _no_stored_image(state: KeyValueState, method: str) -> str:
    kind = f"{type(state).__module__}.{type(state).__qualname__}"
    return (
        f"{kind} does not expose its stored image: it has no {method}() (see "
        "providers.KeyValueState, 'The stored image')"
    )


class StateProvider(ABC):
    """Makes states. Looked up by dotted name from ``topology.state.provider``."""

    @abstractmethod
    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> State:
        """Return the state of ``namespace``: its committed data and any pending prepare."""

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """Validate this provider's settings in ``conf`` without touching the store.

        ``statefulbolts run`` calls it before Spark starts, so a bad setting is reported in
        a moment instead of after the session came up. The default checks nothing: the
        provider reports its config when it makes its first state.

        Raises:
            ProviderConfigError: a setting is wrong (naming the field and what is allowed).
        """
        return  # nothing to check before the first state: a provider opts in by overriding

    def namespaces(self, conf: Mapping[str, Any], prefix: str = "") -> list[str] | None:
        """The namespaces starting with ``prefix`` that hold state, sorted; ``None`` if unknown.

        A namespace holds state once a state of it prepared, committed (with or without a txid)
        or rolled back: from then on the store keeps its transaction record, even when the map
        itself is empty. Merely reading a namespace does not count. Tools use this to find what
        a topology left behind (``checkpoint.status.checkpoint_status``).

        The default returns ``None``: this provider cannot list. Override it when the store can
        enumerate its namespaces.
        """
        return None

    def committed_key_counts(
        self, conf: Mapping[str, Any], namespaces: Sequence[str]
    ) -> dict[str, int] | None:
        """How many keys each namespace's committed map holds; ``None`` if this cannot tell.

        Committed keys only: writes pending in a state object, or staged by a prepare that was
        not committed (or was rolled back), are not counted; a key deleted by a committed
        transaction is gone. A namespace that holds nothing counts 0. The runners call this on
        the driver after commits, at most once per ``topology.state.size.interval.ms``, to
        chart each stateful component's size, so it must be cheap: one round trip to the store
        for all of ``namespaces``, reading no values.

        The default returns ``None``: the size is unknown, and dashboards say so. Override it
        when the store can count a namespace's keys without reading them.

        Raises:
            StateBackendError: the store could not be reached.
        """
        return None

    def commit_namespaces(
        self, conf: Mapping[str, Any], namespaces: Sequence[str], txid: int
    ) -> Sequence[str]:
        """COMMIT ``txid`` in many namespaces at once; return the ones now committed at it.

        The driver's commit of a transaction calls it with every stateful task's namespace,
        then commits each namespace not returned one by one (``State.commit`` after checking
        what the store holds), which reports why one could not. So only namespaces this call
        settled as that path would may be returned: each holds the prepared delta of ``txid``
        on top of committed ``txid - 1`` and is committed here, or holds committed ``txid``
        with nothing prepared. Anything else is left untouched. ``conf`` carries the driver's
        lease epoch, which every write must be fenced with (``State.fence``).

        The default commits nothing and returns ``[]``: every namespace goes the one-by-one
        way. Override it when the store can commit many in one round trip.

        Raises:
            StateBackendError: the store could not be reached (what was committed stays so;
                a COMMIT again is a no-op).
        """
        return []

    def lease_store(self, conf: Mapping[str, Any]) -> LeaseStore | None:
        """The store of this provider's leases (one driver per topology), or ``None``.

        A provider whose states outlive the driver (a server, a file) should return one, and
        its states must then implement ``State.fence``: together they keep a second or stale
        driver of a topology from writing its state (``providers._lease`` has the protocol;
        the contract suite checks it). Without one, nothing stops two drivers of one topology
        from sharing its state, and the runtime warns at submit.

        The default returns ``None``, which is right for state that lives in one driver
        (``DriverOwnedStateProvider``).

        Raises:
            ProviderConfigError: the provider config is invalid.
        """
        return None


class DriverOwnedStateProvider(StateProvider):
    """A provider whose data lives in the driver process for the life of the run.

    Tasks run in other processes, so the runtime ships each task the image of its namespace
    before the task runs (``export_image`` on the driver, ``import_image`` in the task) and brings
    back what the task's state did to it (``take_changes`` in the task, ``apply_changes`` on the
    driver) once the whole transaction has succeeded. Providers backed by a shared store (Redis,
    a file) do not implement this: their tasks talk to the store directly.

    With ``image_version`` (optional) the runtime ships an image whole only when a task process
    has no current copy of it: a process keeps its copy between tasks, and catches up by
    replaying the change logs the driver applied since (``apply_changes``, task side).
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

    def image_version(self, namespace: str) -> Hashable | None:
        """A mark of this process's image of ``namespace`` that changes whenever the image does.

        Any change counts: a replayed change log, a state's prepare, commit or rollback, an
        ``import_image``, a ``replace_stored``, the namespace dropped and made again. Two calls
        return equal marks only if the image did not change in between.

        The runtime uses it to keep images in the task processes between jobs (Spark reuses
        its Python workers) and ship only what changed since: on the driver, to notice a change
        that did not come from a task's change log (then every kept copy is stale); in a task,
        to check that the copy it kept is still the one the last task left. A provider that
        returns marks must honour ``begin_task``'s ``keep``.

        The default returns ``None``: cannot tell, so each job ships every image whole.
        """
        return None

    def commit_changes(self, namespace: str, txid: int) -> bytes | None:
        """Driver side: the change log a task's ``state.commit(txid)`` of ``namespace`` makes.

        For a COMMIT the driver can take itself (no user code runs in it): the runtime applies
        the log with ``apply_changes``, as if a task had returned it, and ships it on to the
        task processes that keep the image. ``None``: the commit changes nothing (``txid`` is
        the committed one). Raises ``StateTransactionError`` when the state's own
        ``commit(txid)`` would (nothing prepared for ``txid``).

        The default raises ``NotImplementedError``: COMMITs then run as tasks.
        """
        raise NotImplementedError

    def begin_task(
        self, root: str, images: Mapping[str, bytes], keep: Collection[str] = ()
    ) -> None:
        """Task side: install ``images``, the state under ``root`` this task may use.

        "Under ``root``" is ``root`` itself and every namespace below it (``root/...``). A task
        process is reused: what an earlier task left under ``root`` is not this task's to read.
        A provider that can should forget it and record the changes of every namespace under
        ``root``, shipped or new (see ``end_task``); the default installs the images.

        ``keep`` names namespaces under ``root`` whose image in this process the caller vouches
        for (the runtime passes it only to a provider whose ``image_version`` gives marks): they
        stay as they are, and record their changes from now on as shipped ones do. The default
        forgets nothing, so it keeps them anyway.
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
