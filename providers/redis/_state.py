"""The Redis state and its provider: the transaction steps as script calls, reads cached.

The layout, the envelope and the round trips are in the package docstring (``providers.redis``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import providers.redis._scripts as _scripts
from providers._base import StateProvider
from providers._config import parse_provider_config
from providers._factory import fence_epoch
from providers._layered import LayeredKeyValueState
from providers._resolve import resolve_serializers
from providers._serializers import Serializer
from providers._ttl import is_expired
from providers.errors import StateSerializationError, StateTransactionError
from providers.redis._clients import (
    address_of,
    client_for,
    connect,
    is_cluster,
    overriding_client,
)
from providers.redis._codec import TOMBSTONE, parse_txid, unwrap, wire
from providers.redis._commits import EXPIRED_PER_COMMIT, commit_namespaces
from providers.redis._errors import BACKEND_ERRORS, backend_error
from providers.redis._image import StoredImageReads, replace_image, scan_hash
from providers.redis._keys import list_namespaces, namespace_base, namespace_keys
from providers.redis._lease import RedisLeaseStore, fenced_error

__all__ = ["RedisKeyValueState", "RedisKeyValueStateProvider"]

# Fields per HMGET of ``get_many``: one round trip for most batches, bounded replies.
_MGET_CHUNK = 10_000

log = logging.getLogger(__name__)

# Storm's ITERATOR_CHUNK_SIZE: how many fields one HSCAN page asks for.
_SCAN_COUNT = 100
# Committed values an iteration keeps in the read cache, at most: a later get of them costs
# nothing, and iterating millions of keys does not hold them all.
_ITER_CACHE_LIMIT = 100_000
_MISSING: Any = object()


class RedisKeyValueState(StoredImageReads, LayeredKeyValueState):
    """A ``KeyValueState`` in Redis, with the same contract as ``InMemoryKeyValueState``.

    Example:
        >>> import fakeredis
        >>> state = RedisKeyValueState("demo/counter-0", fakeredis.FakeRedis())
        >>> state.put("storm", 1)
        >>> state.prepare_commit(0)
        >>> state.commit(0)
        >>> state.get("storm")
        1
    """

    def __init__(
        self,
        namespace: str,
        client: Any,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        *,
        address: str | None = None,
    ) -> None:
        client = connect(client, purpose="the Redis state")  # checks it returns bytes
        super().__init__(namespace, key_serializer, value_serializer)
        self._client = client
        self._address = address or address_of(client)
        keys = namespace_keys(namespace, is_cluster(client))
        self.committed_key, self.prepare_key, self.txid_key, self.ttl_key = keys
        self._load_script = client.register_script(_scripts.LOAD)
        self._prepare_script = client.register_script(_scripts.PREPARE)
        self._commit_script = client.register_script(_scripts.COMMIT)
        self._commit_writes_script = client.register_script(_scripts.COMMIT_WRITES)
        self._rollback_script = client.register_script(_scripts.ROLLBACK)
        # Below _pending (writes since the last prepare, see LayeredKeyValueState): the prepared
        # delta as Redis holds it; committed reads. All three hold payloads (the value
        # serializer's bytes), None for a deletion (pending, prepared) or a missing key (cache):
        # envelopes exist only on the wire, so a get or a put never packs or unpacks one.
        # The cache (reads, prefetches) follows the committed hash: a commit writes what it
        # applied in, replace_stored or a superseding commit empties it; no other object writes
        # the hash while this one lives (one task per namespace).
        self._prepared: dict[bytes, bytes | None] = {}
        self._cache: dict[bytes, bytes | None] = {}
        # Time to live: the expiry of each cached committed key that has one (read with it from
        # the index ns$ttl), whether the index may hold anything (when not, reads skip it), and
        # the expiry of every value of the stored prepared delta.
        self._expiry: dict[bytes, float] = {}
        self._indexed = False
        # How many fields the committed hash had at the load (None once this object changed
        # it), and whether the cache holds all of them: a key not in it is absent. ``prefetch``
        # sets that on a hash empty at the load, so a task's first transaction on a namespace
        # reads nothing (see ``prefetch``); a commit keeps it (what it applied is cached).
        self._loaded_len: int | None = None
        self._whole = False
        self._prepared_expiry: int | None = None
        self._committed_txid: int | None = None
        self._prepared_txid: int | None = None
        # Set by supersede_prepared until the next prepare: that prepare replaces the stored delta.
        self._superseding = False
        # The namespace's rollback count when this object last looked (the fence of prepare).
        self._rollbacks = b"0"
        # The driver's lease epoch every write carries (``fence``); '' until then: unfenced.
        self._epoch = ""
        # The load's ``(commit, prepare)`` until the first ``stored_txids`` or write takes it.
        self._loaded_txids: tuple[int | None, int | None] | None = None
        self._load()

    @property
    def location(self) -> str:
        """``redis <host>:<port>`` (or the cluster's nodes)."""
        return f"redis {self._address}"

    def __repr__(self) -> str:
        return (
            f"RedisKeyValueState(namespace={self.namespace!r}, redis={self._address}, "
            f"committed_txid={self._committed_txid}, prepared_txid={self._prepared_txid})"
        )

    @property
    def committed_txid(self) -> int | None:
        """The txid of the last commit, or ``None`` when nothing was committed."""
        return self._committed_txid

    @property
    def prepared_txid(self) -> int | None:
        """The txid of the pending prepare, or ``None``."""
        return self._prepared_txid

    # -- talking to Redis
    @contextlib.contextmanager
    def _backend(self, step: str, args: Sequence[bytes | str] = ()) -> Iterator[None]:
        """Turn a Redis error into an outage (``StateBackendError``) or a refusal.

        ``args``: what a write step sends; an out-of-memory refusal says how many bytes.
        """
        try:
            yield
        except BACKEND_ERRORS as exc:
            keys = dict.fromkeys((self.committed_key, self.prepare_key, self.txid_key), "hash")
            keys[self.ttl_key] = "zset"
            raise backend_error(
                exc,
                address=self._address,
                step=step,
                subject=f"state {self.namespace!r}",
                client=self._client,
                keys=keys,
                written=sum(map(len, args)) if args else None,
            ) from exc

    def _load(self) -> None:
        with self._backend("load"):
            txids, delta, indexed, length = self._load_script(
                keys=[self.prepare_key, self.txid_key, self.ttl_key, self.committed_key]
            )
        fields = dict(zip(txids[::2], txids[1::2], strict=True))
        self._committed_txid = parse_txid(fields.get(b"commit"))
        self._prepared_txid = parse_txid(fields.get(b"prepare"))
        self._prepared_expiry = parse_txid(fields.get(b"pexpiry"))
        self._indexed = bool(indexed)
        self._loaded_len = int(length)
        self._rollbacks = fields.get(b"rollbacks", b"0")
        self._loaded_txids = (self._committed_txid, self._prepared_txid)
        if self._prepared_txid is not None:
            ns = self.namespace
            self._prepared = {
                k: unwrap(v, ns) for k, v in zip(delta[::2], delta[1::2], strict=True)
            }

    def stored_txids(self) -> tuple[int | None, int | None]:
        """``commit`` and ``prepare`` of ``ns$txid``.

        The first call after the state loaded, before it wrote anything, answers from the
        load's reply (``ns$txid`` read in the same round trip: a task opens its state, then
        checks it, ``checkpoint.check_stored_txids``); any other reads them now.
        """
        loaded, self._loaded_txids = self._loaded_txids, None
        return super().stored_txids() if loaded is None else loaded

    # -- reading (get, put and delete: LayeredKeyValueState)
    def _stored(self, ekey: bytes) -> bytes | None:
        """The payload in the prepared delta, else committed (cached: one HGET per key).

        With an expiry index, the key's expiry comes in the same round trip; a key expired at
        the transaction's timestamp reads as absent.
        """
        payload = self._prepared.get(ekey, _MISSING)
        if payload is not _MISSING:
            return None if is_expired(self._prepared_expiry, self._now) else payload
        payload = self._cache.get(ekey, _MISSING)
        if payload is _MISSING:
            if self._whole:
                return None  # the cache is the whole hash
            if self._indexed:
                self._read_committed([ekey])
                payload = self._cache[ekey]
            else:
                with self._backend("get"):
                    raw = self._client.hget(self.committed_key, ekey)
                payload = None if raw is None else unwrap(raw, self.namespace)
                self._cache[ekey] = payload
        expiry = self._expiry
        if expiry and payload is not None and is_expired(expiry.get(ekey), self._now):
            return None
        return payload

    def _stored_many(self, ekeys: list[bytes]) -> list[bytes | None]:
        """``_stored`` of each key; the committed ones not cached yet in one ``HMGET``."""
        prepared, cache = self._prepared, self._cache
        if not self._whole:
            self._read_committed([k for k in ekeys if k not in prepared and k not in cache])
        return [self._stored(k) for k in ekeys]

    def _read_committed(self, ekeys: list[bytes], step: str = "get") -> None:
        """Cache the committed payload of each key (``None``: absent), ``_MGET_CHUNK`` per HMGET.

        With an expiry index, each chunk's ``ZMSCORE`` goes in the same round trip.
        """
        cache, ns, expiry = self._cache, self.namespace, self._expiry
        for start in range(0, len(ekeys), _MGET_CHUNK):
            chunk = ekeys[start : start + _MGET_CHUNK]
            with self._backend(step):
                if self._indexed:
                    pipe = self._client.pipeline(transaction=False)
                    pipe.hmget(self.committed_key, chunk)
                    pipe.zmscore(self.ttl_key, chunk)
                    raws, scores = pipe.execute()
                else:
                    raws, scores = self._client.hmget(self.committed_key, chunk), None
            for ekey, raw in zip(chunk, raws, strict=True):
                cache[ekey] = None if raw is None else unwrap(raw, ns)
            if scores is not None:
                for ekey, score in zip(chunk, scores, strict=True):
                    if score is None:
                        expiry.pop(ekey, None)
                    else:
                        expiry[ekey] = score

    def prefetch(self, keys: Iterable[Any]) -> None:
        """Read ahead the committed values of ``keys`` not known: one ``HMGET`` per 10,000.

        Values and absences go to the read cache, where ``get`` finds them as if it had read
        each key singly. A key the key serializer refuses is skipped (its ``get`` raises).

        A committed hash that was empty at the load (and has no expiry index) is read not at
        all, and ``keys`` not even iterated: from here on every key this object has not
        written or cached reads as absent without a round trip. Only here, where a task is
        about to run its tuples, right after its load: nothing else writes a task's namespace
        while the task runs (the driver commits between jobs).
        """
        if self._whole:
            return
        if self._loaded_len == 0 and not self._indexed:
            self._whole = True
            log.debug("state %s: nothing committed; no reads", self.namespace)
            return
        pending, prepared, cache = self._pending, self._prepared, self._cache
        wanted: dict[bytes, None] = {}
        for key in keys:
            try:
                ekey = self._encode_key(key)
            except StateSerializationError:
                continue  # a hint only: the bolt's own get of the key reports the error
            if ekey not in pending and ekey not in prepared and ekey not in cache:
                wanted[ekey] = None
        if wanted:
            self._read_committed(list(wanted), "prefetch")
            log.debug("state %s: prefetched %s keys", self.namespace, len(wanted))

    def _live_encoded(self) -> Iterator[tuple[bytes, bytes]]:
        """Pending writes, then the prepared delta, then ``HSCAN`` of committed; each key once.

        Memory stays bounded whatever the size of the committed hash: only the keys of the
        pending writes and the prepared delta are remembered (to hide them in the committed
        hash), and at most ``_ITER_CACHE_LIMIT`` committed values are cached on the way. HSCAN
        may return a field twice if the hash is written while the scan runs; nothing writes a
        namespace's committed hash but its one task's commit, which never overlaps its reads.
        """
        self._flush()
        seen: set[bytes] = set()
        prepared = dict(self._prepared)
        if is_expired(self._prepared_expiry, self._now):
            prepared = dict.fromkeys(prepared)  # gone, and hiding what is below
        for layer in (dict(self._pending), prepared):
            for ekey, payload in layer.items():
                if ekey not in seen:
                    seen.add(ekey)
                    if payload is not None:
                        yield ekey, payload
        cache = self._cache
        scan = scan_hash(
            self._client,
            self.committed_key,
            _SCAN_COUNT,
            self.namespace,
            self._backend,
            "iteration",
        )
        if self._indexed and self._now is not None:
            scan = self._unexpired(scan)
        for ekey, payload in scan:
            if ekey not in seen and payload is not None:
                if len(cache) < _ITER_CACHE_LIMIT:
                    cache.setdefault(ekey, payload)
                yield ekey, payload

    def _unexpired(
        self, scan: Iterator[tuple[bytes, bytes | None]]
    ) -> Iterator[tuple[bytes, bytes | None]]:
        """``scan`` without the fields expired at ``_now``: one ``ZMSCORE`` per page."""
        page: list[tuple[bytes, bytes | None]] = []
        for item in scan:
            page.append(item)
            if len(page) >= _SCAN_COUNT:
                yield from self._live(page)
                page = []
        yield from self._live(page)

    def _live(self, page: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
        if not page:
            return page
        with self._backend("iteration"):
            scores = self._client.zmscore(self.ttl_key, [ekey for ekey, _ in page])
        now = self._now
        return [item for item, at in zip(page, scores, strict=True) if not is_expired(at, now)]

    # -- the lease fence (providers._lease)
    def fence(self, epoch: int) -> None:
        """Carry lease ``epoch`` with every write script from now on (see ``State.fence``)."""
        self._epoch = str(int(epoch))

    def stored_fence(self) -> int | None:
        """Field ``epoch`` of ``ns$txid``: the highest lease epoch that wrote the namespace."""
        with self._backend("fence read"):
            return parse_txid(self._client.hget(self.txid_key, "epoch"))

    def _refuse(self, step: str, fence: Any) -> NoReturn:
        """Raise the ``StateFencedError`` of a write script's ``{FENCED, fence}`` reply."""
        subject = f"state {self.namespace!r}"
        raise fenced_error(subject, step, int(self._epoch), int(fence))

    # -- the transaction
    def prepare_commit(self, txid: int) -> None:
        """Move pending writes into the prepared delta of ``txid`` (one script call).

        Re-preparing the same txid adds the newer writes (newer wins). Preparing another txid
        while one is prepared, a txid at or below the committed one, or anything after another
        state object rolled the namespace back since this one was loaded, raises
        ``StateTransactionError`` and keeps the pending writes; so does a fenced state whose
        epoch is below the namespace's fence, with ``StateFencedError``.
        """
        self._loaded_txids = None
        self._flush()
        mode = "1" if self._superseding else "0"
        now, expiry = self._now, self._write_expiry()
        args: list[Any] = [
            str(int(txid)),
            mode,
            self._rollbacks,
            "" if now is None else str(now),
            "" if expiry is None else str(expiry),
            self._epoch,
            *wire(self._pending),
        ]
        step = f"prepare of txid {txid}"
        with self._backend(step, args):
            reply = self._prepare_script(keys=[self.prepare_key, self.txid_key], args=args)
        code = int(reply[0])
        if code == _scripts.FENCED:
            self._refuse(step, reply[1])
        if code == 3:
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid}: the namespace was rolled "
                f"back since this state was loaded (rollback count {int(self._rollbacks)} -> "
                f"{int(reply[1])}); a task attempt that outlived its transaction must not write"
            )
            raise StateTransactionError(msg)
        if code == 1:
            self._prepared_txid, self._committed_txid = parse_txid(reply[1]), parse_txid(reply[2])
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid} while txid "
                f"{self._prepared_txid} is prepared and not committed"
            )
            raise StateTransactionError(msg)
        if code == 2:
            self._committed_txid = parse_txid(reply[2])
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid}; txid "
                f"{self._committed_txid} is already committed"
            )
            raise StateTransactionError(msg)
        if parse_txid(reply[1]) is None or self._superseding:
            self._prepared = {}
            self._superseding = False
        self._prepared.update(self._pending)
        self._prepared_expiry = expiry
        log.debug(
            "state %s: prepared txid %s (%s writes)", self.namespace, txid, len(self._pending)
        )
        self._pending = {}
        self._prepared_txid = int(txid)

    def commit(self, txid: int | None = None) -> None:
        """Commit the prepared delta of ``txid`` atomically; the committed txid again is a no-op.

        Without ``txid``, commit the pending writes at once (the checkpoint spout's save).

        Steps (one Lua script, so Redis applies all or nothing):
            1. Check ``ns$txid``: a fenced state's epoch must not be below ``epoch`` (else
               ``StateFencedError``); ``prepare`` must equal ``txid``; or nothing is prepared
               and ``commit`` equals ``txid`` (a retried COMMIT: stop, nothing to do).
            2. Apply ``ns$prepare`` to ``ns``: HSET values, HDEL tombstones.
            3. Index what was written in ``ns$ttl`` by the prepare's expiry (none: unindex).
            4. Delete the fields expired at the prepare's timestamp from ``ns`` and ``ns$ttl``,
               ``EXPIRED_PER_COMMIT`` at most.
            5. DEL ``ns$prepare``; set ``commit`` to ``txid`` and ``time`` to the timestamp;
               remove ``prepare``; raise ``epoch`` to the state's lease epoch.
        """
        self._loaded_txids = None
        self._loaded_len = None
        if txid is None:
            self._commit_writes()
            return
        step = f"commit of txid {txid}"
        with self._backend(step):
            reply = self._commit_script(
                keys=[self.committed_key, self.prepare_key, self.txid_key, self.ttl_key],
                args=[str(int(txid)), TOMBSTONE, EXPIRED_PER_COMMIT, self._epoch],
            )
        code = int(reply[0])
        if code == _scripts.FENCED:
            self._refuse(step, reply[1])
        if code == 2:
            self._prepared_txid, self._committed_txid = parse_txid(reply[1]), parse_txid(reply[2])
            msg = (
                f"state {self.namespace!r}: cannot commit txid {txid}; prepared txid is "
                f"{self._prepared_txid}, committed txid is {self._committed_txid}"
            )
            raise StateTransactionError(msg)
        if code == 0:
            if self._superseding:
                # The delta applied is one this object never read: what it cached may be stale.
                self._cache = {}
                self._whole = False
                self._superseding = False
            self._remember(self._prepared, self._prepared_expiry)  # the cache stays whole
            log.debug(
                "state %s: committed txid %s (%s expired keys deleted)",
                self.namespace,
                txid,
                int(reply[1]),
            )
        else:
            self._whole = False  # committed before, by another: its delta is not cached
        self._prepared = {}
        self._prepared_expiry = None
        self._prepared_txid = None
        self._committed_txid = int(txid)

    def _commit_writes(self) -> None:
        self._flush()
        args: list[Any] = [TOMBSTONE, self._epoch, *wire(self._pending)]
        with self._backend("commit", args):
            code, committed = self._commit_writes_script(
                keys=[self.committed_key, self.txid_key, self.ttl_key], args=args
            )
        if int(code) == _scripts.FENCED:
            self._refuse("commit", committed)
        self._remember(self._pending, None)
        self._pending = {}
        self._committed_txid = parse_txid(committed)

    def _remember(self, applied: Mapping[bytes, bytes | None], expiry: int | None) -> None:
        """Keep the read cache equal to Redis after ``applied`` reached the committed hash.

        Keys the commit deleted as expired may stay cached: their cached expiry hides them.
        """
        self._cache.update(applied)
        expiries = self._expiry
        if expiry is not None:
            self._indexed = True
            for ekey, payload in applied.items():
                if payload is None:
                    expiries.pop(ekey, None)
                else:
                    expiries[ekey] = expiry
        elif expiries:
            for ekey in applied:
                expiries.pop(ekey, None)

    # -- the stored image (see KeyValueState; reading it is ``_image.StoredImageReads``)
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
        """Replace the namespace's keys: committed hash, prepared delta, record, expiry index.

        Staged beside the namespace, then swapped in by one script (``_image.replace_image``);
        if staging fails, the namespace is untouched.
        """
        if prepared and prepared_txid is None:
            msg = f"state {self.namespace!r}: a prepared delta needs a prepared txid"
            raise StateTransactionError(msg)
        self._loaded_txids = None
        keys = (self.committed_key, self.prepare_key, self.txid_key, self.ttl_key)
        image = (committed_txid, committed, prepared_txid, prepared)
        fence = replace_image(
            self._client, keys, image, self._backend, (expiries, committed_time), self._epoch
        )
        if fence is not None:
            self._refuse("replace", fence)
        self._pending, self._fresh, self._cache, self._expiry = {}, {}, {}, {}
        self._loaded_len, self._whole = None, False
        self._indexed, self._prepared_expiry = True, None
        self._prepared = {} if prepared_txid is None else dict(prepared)
        self._committed_txid, self._prepared_txid = committed_txid, prepared_txid
        self._rollbacks, self._superseding = b"0", False

    def supersede_prepared(self, txid: int) -> None:
        """Read past a stored delta of ``txid``; the next prepare replaces it (see ``State``).

        Nothing is sent now: the old delta goes in the same script call as the new one, so an
        attempt killed in between leaves the other attempt's delta in place.
        """
        # Also with nothing prepared at load: a concurrent attempt may prepare meanwhile.
        if self._prepared_txid in (None, int(txid)):
            self._prepared = {}
            self._superseding = True

    def rollback(self) -> None:
        """Drop pending writes, the prepared delta and the prepare txid; count the rollback.

        One script call. States of this namespace loaded before it can no longer prepare.
        """
        self._loaded_txids = None
        with self._backend("rollback"):
            reply = self._rollback_script(
                keys=[self.prepare_key, self.txid_key], args=[self._epoch]
            )
        if int(reply[0]) == _scripts.FENCED:
            self._refuse("rollback", reply[1])
        _, committed, rollbacks = reply
        self._rollbacks = str(int(rollbacks)).encode()
        self._pending, self._fresh = {}, {}
        self._superseding = False
        self._prepared = {}
        self._prepared_expiry = None
        self._prepared_txid = None
        self._committed_txid = parse_txid(committed)


class RedisKeyValueStateProvider(StateProvider):
    """Makes ``RedisKeyValueState`` objects from ``topology.state.provider.config``."""

    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> RedisKeyValueState:
        """Return the state of ``namespace``: its committed data and any pending prepare.

        Raises:
            ProviderConfigError: the provider config is invalid.
            StateBackendError: Redis could not be reached (names host, port and namespace).
            StateBackendRefusedError: Redis refused (a wrong password, out of memory, ...).
        """
        config = parse_provider_config(conf)
        keys, values = resolve_serializers(config, conf)
        client = overriding_client()
        if client is not None:
            return RedisKeyValueState(namespace, client, keys, values)
        endpoint = config.redis_endpoint()
        client = client_for(endpoint, namespace)
        return RedisKeyValueState(namespace, client, keys, values, address=endpoint.address)

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """Validate the provider config, its serializer classes and its Redis target."""
        config = parse_provider_config(conf)
        resolve_serializers(config, conf)
        config.redis_endpoint()

    def committed_key_counts(
        self, conf: Mapping[str, Any], namespaces: Sequence[str]
    ) -> dict[str, int]:
        """``HLEN`` of each namespace's committed hash, in one pipelined round trip.

        Tombstones never reach the committed hash, so its length is the count of committed
        keys; the prepared delta (``ns$prepare``) is another key and is not counted.

        Raises:
            ProviderConfigError: the provider config is invalid.
            StateBackendError: Redis could not be reached.
            StateBackendRefusedError: Redis refused (a wrong password, ...).
        """
        names = list(dict.fromkeys(namespaces))
        if not names:
            return {}
        client, address = _provider_client(conf, names[0])
        cluster = is_cluster(client)
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.hlen(namespace_base(name, cluster))
        try:
            lengths = pipe.execute()
        except BACKEND_ERRORS as exc:
            step = f"key count of {len(names)} namespaces ({names[0]!r}, ...)"
            raise backend_error(exc, address=address, step=step, client=client) from exc
        return {name: int(n) for name, n in zip(names, lengths, strict=True)}

    def commit_namespaces(
        self, conf: Mapping[str, Any], namespaces: Sequence[str], txid: int
    ) -> list[str]:
        """COMMIT ``txid`` in ``namespaces``, one pipelined round trip (``_commits``).

        On a cluster nothing is batched: every namespace is left to the one-by-one commit.

        Raises:
            ProviderConfigError: the provider config is invalid.
            StateBackendError: Redis could not be reached.
            StateBackendRefusedError: Redis refused (a wrong password, out of memory, ...).
        """
        if not namespaces:
            return []
        client, address = _provider_client(conf, namespaces[0])
        epoch = fence_epoch(conf)
        try:
            return commit_namespaces(client, namespaces, txid, "" if epoch is None else str(epoch))
        except BACKEND_ERRORS as exc:
            step = f"commit of txid {txid} in {len(namespaces)} namespaces ({namespaces[0]!r}, ...)"
            raise backend_error(exc, address=address, step=step, client=client) from exc

    def namespaces(self, conf: Mapping[str, Any], prefix: str = "") -> list[str]:
        """The namespaces starting with ``prefix`` that have a ``$txid`` hash, sorted.

        One ``SCAN`` for ``<prefix>*$txid`` (``{<prefix>*}$txid`` on a cluster, every primary
        scanned), with ``prefix`` matched literally.

        Raises:
            ProviderConfigError: the provider config is invalid.
            StateBackendError: Redis could not be reached or failed during the scan.
        """
        client, address = _provider_client(conf, f"{prefix}*")
        try:
            return list_namespaces(client, prefix, is_cluster(client))
        except BACKEND_ERRORS as exc:
            step = f"namespace listing (prefix {prefix!r})"
            raise backend_error(exc, address=address, step=step, client=client) from exc

    def lease_store(self, conf: Mapping[str, Any]) -> RedisLeaseStore:
        """The leases of this Redis (``providers.redis._lease``), on the provider's client.

        The store shares the process's pooled client with the states; its ``close`` leaves it
        open (``reset_clients`` closes it).

        Raises:
            ProviderConfigError: the provider config is invalid.
            StateBackendError: Redis could not be reached.
        """
        client, address = _provider_client(conf, None, subject="the topologies' leases")
        return RedisLeaseStore(client, address=address)


def _provider_client(
    conf: Mapping[str, Any], namespace: str | None, *, subject: str | None = None
) -> tuple[Any, str]:
    """The client a provider call uses (the test override, else the shared one) and its address."""
    client = overriding_client()
    if client is not None:
        return client, address_of(client)
    endpoint = parse_provider_config(conf).redis_endpoint()
    return client_for(endpoint, namespace, subject=subject), endpoint.address
