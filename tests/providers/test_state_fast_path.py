"""The fresh-write layer (``providers._layered``) changes nothing a caller can see.

Scalars put under ``str`` keys stay Python objects until a prepare; these tests mix them with
writes that take the encoded path, with deletes, errors and every transaction step, over the
in-memory state and the Redis state on fakeredis. Each runs twice: with ``get`` and ``put`` of
the compiled base (``providers/_native/_fresh.c``, a fresh ``str`` key's case in C) and with the
Python methods alone, as a state runs where the module was not built.
"""

from __future__ import annotations

import enum
import pickle
import random
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
from test_state_contract import Backend

from providers import InMemoryKeyValueStateProvider, StateSerializationError, StateTransactionError
from providers._layered import COMPILED, LayeredKeyValueState


@pytest.fixture(params=["compiled", "python"])
def layer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which ``get`` and ``put`` the layered states run: the compiled base's, or the Python ones."""
    if request.param == "python":
        monkeypatch.setattr(LayeredKeyValueState, "get", LayeredKeyValueState._get)
        monkeypatch.setattr(LayeredKeyValueState, "put", LayeredKeyValueState._put)
    return str(request.param)


@pytest.fixture(params=["memory", "fakeredis"])
def backend(request: pytest.FixtureRequest, layer: str) -> Iterator[Backend]:
    if request.param == "memory":
        b = Backend("memory", "providers.memory.InMemoryKeyValueStateProvider", {})
        yield b
        InMemoryKeyValueStateProvider.drop(b.namespace.split("/")[0])
    else:
        import fakeredis

        from providers.redis import override_client

        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        with override_client(client):
            yield Backend("fakeredis", "providers.redis.RedisKeyValueStateProvider", {})


def committed(backend: Backend, state: Any, txid: int, **extra: Any) -> Any:
    """Prepare and commit ``state`` as ``txid``; return a new state object on the namespace."""
    state.prepare_commit(txid)
    state.commit(txid)
    return backend.state(**extra)


class Word(enum.StrEnum):
    """A key that is not an exact ``str`` but encodes exactly like one."""

    STORM = "storm"


class Level(enum.IntEnum):
    """An ``int`` subclass: msgpack stores it as a plain int."""

    HIGH = 3


class UnhashableStr(str):
    """A ``str`` key msgpack accepts but a dict cannot hold."""

    __hash__ = None  # type: ignore[assignment]


# Values the fast path takes, at the edges of what msgpack encodes.
SCALARS: dict[str, Any] = {
    "int": 7,
    "int_max": 2**64 - 1,
    "int_min": -(2**63),
    "float": -0.5,
    "bool": True,
    "bytes": b"\x00\xff",
    "str": "storm",
    "empty": "",
}


def test_scalars_read_back_with_their_types_before_and_after_commit(backend: Backend) -> None:
    state = backend.state()
    for key, value in SCALARS.items():
        state.put(key, value)
    for key, value in SCALARS.items():
        got = state.get(key)
        assert (type(got), got) == (type(value), value), key
    reopened = committed(backend, state, 1)
    for key, value in SCALARS.items():
        got = reopened.get(key)
        assert (type(got), got) == (type(value), value), key


def test_list_after_fast_put_wins(backend: Backend) -> None:
    state = backend.state()
    state.put("k", 1)
    state.put("k", [1, 2])
    assert state.get("k") == [1, 2]
    assert dict(state) == {"k": [1, 2]}
    assert committed(backend, state, 1).get("k") == [1, 2]


def test_fast_put_after_list_wins(backend: Backend) -> None:
    state = backend.state()
    state.put("k", [1, 2])
    state.put("k", 1)
    assert state.get("k") == 1
    assert dict(state) == {"k": 1}
    assert committed(backend, state, 1).get("k") == 1


def test_delete_of_fast_put_returns_it_and_reaches_the_store(backend: Backend) -> None:
    state = backend.state()
    state.put("k", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("k", 2)
    assert state.delete("k") == 2
    assert state.get("k") is None
    assert state.get("k", 0) == 0
    assert state.delete("k") is None
    assert dict(state) == {}
    assert committed(backend, state, 2).get("k") is None


def test_fast_put_is_prepared_and_committed(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.prepare_commit(1)
    assert backend.state().get("a") == 1  # a new object sees the prepared delta
    state.commit(1)
    state.put("a", 2)
    state.put("b", "x")
    state.commit()  # without txid: the pending writes at once
    assert dict(backend.state()) == {"a": 2, "b": "x"}


def test_rollback_drops_fast_puts(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("a", 2)
    state.put("b", 3)
    state.rollback()
    assert (state.get("a"), state.get("b")) == (1, None)
    assert dict(state) == {"a": 1}
    state.prepare_commit(2)
    state.commit(2)
    assert dict(backend.state()) == {"a": 1}


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1])
def test_int_out_of_msgpack_range_fails_at_put(backend: Backend, value: int) -> None:
    state = backend.state()
    state.put("big", 1)
    with pytest.raises(StateSerializationError) as info:
        state.put("big", value)
    assert "'big'" in str(info.value)
    assert backend.namespace in str(info.value)
    assert state.get("big") == 1
    assert committed(backend, state, 1).get("big") == 1


def test_lone_surrogate_value_fails_at_put(backend: Backend) -> None:
    state = backend.state()
    state.put("s", "ok")
    with pytest.raises(StateSerializationError, match="'s'"):
        state.put("s", "caf\udce9")
    assert state.get("s") == "ok"
    state.put("s", "café")  # non-ASCII but encodable: stored through the encoded path
    assert committed(backend, state, 1).get("s") == "café"


def test_lone_surrogate_key_fails_at_put(backend: Backend) -> None:
    state = backend.state()
    with pytest.raises(StateSerializationError):
        state.put("\udce9", 1)
    assert dict(state) == {}
    assert len(state) == 0


def test_refused_put_keeps_the_fast_value(backend: Backend) -> None:
    state = backend.state()
    state.put("k", 1)
    with pytest.raises(StateSerializationError, match="builtins.object"):
        state.put("k", object())
    with pytest.raises(StateSerializationError, match="None"):
        state.put("k", None)
    assert state.get("k") == 1


def test_value_class_turns_off_the_fast_path(backend: Backend) -> None:
    state = backend.state(valueClass="float")
    state.put("k", 3)
    got = state.get("k")
    assert (type(got), got) == (float, 3.0)
    assert list(state) == [("k", 3.0)]
    got = committed(backend, state, 1, valueClass="float").get("k")
    assert (type(got), got) == (float, 3.0)


def test_key_class_turns_off_the_fast_path(backend: Backend) -> None:
    state = backend.state(keyClass=f"{__name__}.Word")
    state.put("storm", 1)
    assert list(state) == [(Word.STORM, 1)]
    assert type(next(iter(state))[0]) is Word


def test_subclass_values_are_stored_as_their_encoding(backend: Backend) -> None:
    state = backend.state()
    state.put("level", Level.HIGH)
    state.put("blob", bytearray(b"ab"))
    level, blob = state.get("level"), state.get("blob")
    assert (type(level), level) == (int, 3)
    assert (type(blob), blob) == (bytes, b"ab")


def test_iteration_and_len_include_fast_puts(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    state.put("a", 10)
    state.put("c", [3])
    state.put("d", 4)
    assert dict(state) == {"a": 10, "b": 2, "c": [3], "d": 4}
    assert len(state) == 4
    state.delete("d")
    assert len(state) == 3


def test_iteration_keeps_the_order_of_first_writes(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.put("b", [2])
    state.put("c", 3)
    state.put("a", 4)
    state.put("b", 5)
    state.put("c", [6])
    assert list(state) == [("a", 4), ("b", 5), ("c", [6])]


def test_reprepare_of_same_txid_includes_fast_puts(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.put("b", 1)
    state.prepare_commit(1)
    state.put("a", 2)
    state.put("c", 3)
    state.prepare_commit(1)
    assert backend.state().get("a") == 2
    state.commit(1)
    assert dict(backend.state()) == {"a": 2, "b": 1, "c": 3}


def test_refused_prepare_keeps_fast_puts(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.prepare_commit(1)
    state.put("a", 2)
    with pytest.raises(StateTransactionError):
        state.prepare_commit(2)
    assert state.get("a") == 2
    state.prepare_commit(1)
    state.commit(1)
    assert backend.state().get("a") == 2


def test_a_non_str_key_encoding_like_a_fast_key_sees_and_replaces_it(backend: Backend) -> None:
    state = backend.state()
    state.put("storm", 1)
    assert state.get(Word.STORM) == 1
    state.put("storm", 2)
    state.put(Word.STORM, [3])
    assert state.get("storm") == [3]
    state.put("storm", 4)
    assert state.delete(Word.STORM) == 4
    assert state.get("storm") is None
    state.put("storm", 5)
    state.put(UnhashableStr("storm"), 6)
    assert state.get("storm") == 6
    assert committed(backend, state, 1).get("storm") == 6


def test_unhashable_keys_work_beside_fast_puts(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.put(["x", 1], 2)
    assert state.get(["x", 1]) == 2
    assert state.delete(["x", 1]) == 2
    state.put(["x", 2], 3)
    assert state.get("a") == 1
    items = list(committed(backend, state, 1))
    assert len(items) == 2
    assert ("a", 1) in items
    assert (["x", 2], 3) in items


class PrefixedKeys:
    """A key serializer of its own: msgpack behind a prefix (never a plain msgpack encoding)."""

    def serialize(self, obj: Any) -> bytes:
        return b"k:" + msgpack.packb(list(obj) if isinstance(obj, tuple) else obj)

    def deserialize(self, data: bytes) -> Any:
        return msgpack.unpackb(data[2:])


KEYS: list[Any] = [
    *["a", "b", ("a",), ("b",), ("c",), "c", "storm", Word.STORM],
    *[7, ["x", 1], ("x", "y")],
]
VALUES: list[Any] = [1, 2.5, "t", [1, 2], {"n": 1}, [3, "x"]]


@pytest.mark.parametrize("seed", range(8))
def test_get_many_and_put_many_read_and_write_what_get_and_put_do(
    backend: Backend, seed: int
) -> None:
    """Random batches over str keys, one-str tuple keys (a transactional map's) and a key that
    encodes like a str, an int, a list and a two-str tuple key, a key no state of the process
    encoded before, scalars and lists, repeated keys, deletes and commits: the batch calls
    (``update_many`` too) against the calls one by one."""
    rng = random.Random(seed)
    many, each = backend.state(), backend.state(f"{backend.namespace}-each")
    for txid in range(1, 4):
        for step in range(12):
            op = rng.choice(["put_many", "get_many", "delete", "update_many"])
            keys = [rng.choice(KEYS) for _ in range(rng.randrange(1, 7))]
            if step % 3 == 0:  # not in the process's cache of encoded keys yet
                keys.insert(rng.randrange(len(keys) + 1), (f"{time.time_ns()}-{seed}",))
            if op == "update_many":
                new = [rng.choice([*VALUES, None]) for _ in keys]
                old = [each.get(k) for k in keys]
                many.update_many(keys, lambda got, old=old, new=new: got == old and new or [])
                for key, value in zip(keys, new, strict=True):
                    if value is not None:
                        each.put(key, value)
            elif op == "put_many":
                pairs = [(k, rng.choice(VALUES)) for k in keys]
                many.put_many(pairs)
                for key, value in pairs:
                    each.put(key, value)
            elif op == "get_many":
                got = many.get_many(keys, "none")
                assert got == [each.get(k, "none") for k in keys]
                assert got == each.get_many(keys, "none")
            else:
                assert many.delete(keys[0]) == each.delete(keys[0])
            assert list(many) == list(each)  # the same values, in the order of first writes
        for state in (many, each):
            state.prepare_commit(txid)
            state.commit(txid)
        many = backend.state()
        each = backend.state(f"{backend.namespace}-each")
        # A state that wrote nothing yet reads every key from the store, repeated ones too.
        twice = [*KEYS, *reversed(KEYS)]
        assert many.get_many(twice, 0) == [each.get(k, 0) for k in twice]
        assert many.get_many(KEYS) == each.get_many(KEYS) == [each.get(k) for k in KEYS]


def test_put_many_names_the_state_and_the_key_of_a_refused_value(backend: Backend) -> None:
    state = backend.state()
    state.put("fresh", 1)
    with pytest.raises(StateSerializationError, match=r"value for key \('w',\) cannot be stored"):
        state.put_many([(("ok",), [1]), (("w",), [object()]), (("after",), [2])])
    with pytest.raises(StateSerializationError, match="None"):
        state.put_many([(("n",), None)])
    keys = [("ok",), ("w",), ("after",), ("n",), "fresh"]
    assert state.get_many(keys) == [[1], None, None, None, 1]


def test_a_state_with_its_own_key_serializer_never_takes_a_shared_encoding(
    backend: Backend,
) -> None:
    # Plain msgpack states share their keys' encodings (``_layered._SHARED_KEYS``); this one
    # encodes its keys itself, even those another state encoded first.
    plain = backend.state()
    plain.put_many([(("w",), [1]), ("s", 1)])
    assert plain.get_many([("w",), "s"]) == [[1], 1]
    own = backend.state(f"{backend.namespace}-own", keySerializerClass=f"{__name__}.PrefixedKeys")
    own.put_many([(("w",), [2]), ("s", 2)])
    assert own.get_many([("w",), "s"]) == [[2], 2]
    own.prepare_commit(1)
    own.commit(1)
    stored = {key for key, _ in own.scan_committed()}
    assert stored == {PrefixedKeys().serialize(("w",)), PrefixedKeys().serialize("s")}


def test_the_layers_are_read_and_written_in_one_place() -> None:
    # The fresh-layer fast path lives in LayeredKeyValueState only; a subclass reads its store.
    from providers._layered import LayeredKeyValueState
    from providers.memory import InMemoryKeyValueState
    from providers.redis import RedisKeyValueState

    for cls in (InMemoryKeyValueState, RedisKeyValueState):
        assert issubclass(cls, LayeredKeyValueState)
        assert {"get", "put", "delete", "_encode_key"} & set(vars(cls)) == set(), cls
        assert "_stored" in vars(cls)


class Spied:
    """Records the calls that reach a state's Python ``_get`` and ``_put``."""

    def __init__(self, state: Any) -> None:
        self.calls: list[tuple[str, Any]] = []
        get, put = state._get, state._put

        def _get(key: Any, default: Any = None) -> Any:
            self.calls.append(("get", key))
            return get(key, default)

        def _put(key: Any, value: Any) -> None:
            self.calls.append(("put", key))
            put(key, value)

        state._get, state._put = _get, _put


def test_the_compiled_layer_is_built_and_takes_only_a_fresh_str_key() -> None:
    """The test command builds ``_fresh``; its ``get`` and ``put`` answer a ``str`` key of the
    fresh layer themselves and hand every other call to the Python methods."""
    from providers._native._fresh import FreshLayer

    assert COMPILED, "providers/_native/_fresh.c was not built (pip install -e . builds it)"
    assert LayeredKeyValueState.get is FreshLayer.get
    assert LayeredKeyValueState.put is FreshLayer.put
    state = Backend("memory", "providers.memory.InMemoryKeyValueStateProvider", {}).state()
    spied = Spied(state)
    state.put("w", 1)  # new to the fresh layer: its place in _pending is the Python method's
    state.put("w", 2)
    state.put("w", 2**63 - 1)
    state.put("w", "ascii")
    state.put("w", b"raw")
    state.put("w", 0.5)
    state.put("w", False)
    assert state.get("w") is False
    assert state.get("w", 0) is False
    assert spied.calls == [("put", "w")]
    spied.calls.clear()
    state.put("w", 2**63)  # msgpack takes it; the C case stops at a long long
    state.put("w", "é")
    state.put("w", Level.HIGH)
    state.put(Word.STORM, 1)
    state.put(b"w", 1)
    state.put(key="w", value=3)
    assert state.get("missing", 0) == 0
    assert state.get(b"w") == 1
    assert state.get(Word.STORM) == 1
    assert state.get(key="w") == 3
    assert spied.calls == [
        ("put", "w"),
        ("put", "w"),
        ("put", "w"),
        ("put", Word.STORM),
        ("put", b"w"),
        ("put", "w"),
        ("get", "missing"),
        ("get", b"w"),
        ("get", Word.STORM),
        ("get", "w"),
    ]
    assert state.get("w") == 3
    del state._get, state._put  # the spies
    assert pickle.loads(pickle.dumps(state)).get("w") == 3  # the base has no fields of its own
    with pytest.raises(TypeError, match=r"get\(\) takes a key and an optional default \(0 given\)"):
        state.get()
    with pytest.raises(TypeError, match=r"put\(\) takes a key and a value \(1 given\)"):
        state.put("w")


FUZZ_KEYS: list[Any] = ["a", "b", "c", "storm", Word.STORM, b"a", 7, ("a",), ["a"]]
FUZZ_VALUES: list[Any] = [
    *[0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, Level.HIGH],
    *[True, False, 0.5, -0.0, "", "ascii", "é", "\ud800", b"", b"\x00", [1], {"n": 1}, None],
]


def outcome(call: Any, *args: Any) -> tuple[str, Any]:
    """What ``call(*args)`` returned, or the type and words of what it raised."""
    try:
        got = call(*args)
    except Exception as exc:  # noqa: BLE001 -- the same error either way is the point
        return "raised", (type(exc).__name__, str(exc).replace("-py", ""))
    return "returned", (type(got).__name__, got)


@pytest.mark.parametrize("seed", range(16))
def test_the_compiled_and_python_layers_do_the_same(seed: int) -> None:
    """Random puts, gets and deletes over exact and other ``str`` keys, values at and past each
    edge of the C case (a long long, msgpack's range, ASCII) and refused ones, with prepares,
    commits and rollbacks: a state on the compiled layer and one on the Python methods return
    and raise the same, hold the same and commit the same."""
    rng = random.Random(seed)
    backend = Backend("memory", "providers.memory.InMemoryKeyValueStateProvider", {})
    root = backend.namespace
    states = {name: backend.state(f"{root}{name}") for name in ("", "-py")}
    python = states["-py"]
    python.get, python.put = python._get, python._put  # the Python methods, as when not built
    txid = 0
    try:
        for step in range(300):
            key, value = rng.choice(FUZZ_KEYS), rng.choice(FUZZ_VALUES)
            op = rng.choices(["put", "get", "delete", "end"], [10, 8, 1, 1])[0]
            got = []
            for state in states.values():
                if op == "put":
                    got.append(outcome(state.put, key, value))
                elif op == "get":
                    got.append(outcome(state.get, key, "none"))
                elif op == "delete":
                    got.append(outcome(state.delete, key))
                elif step % 2:
                    state.rollback()
                else:
                    state.prepare_commit(txid + 1)
                    state.commit(txid + 1)
            txid += op == "end" and not step % 2
            if got:
                assert got[0] == got[1], (step, op, key, value)
            assert list(states[""]) == list(python), step
        for name, state in states.items():
            state.prepare_commit(txid + 1)
            state.commit(txid + 1)
            states[name] = backend.state(f"{root}{name}")
        assert list(states[""]) == list(states["-py"])
        assert len(states[""]) > 0
    finally:
        InMemoryKeyValueStateProvider.drop(root.split("/")[0])
