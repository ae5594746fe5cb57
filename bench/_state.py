"""Large committed state for the benchmarks: seed it, check it, drop it.

A word count that has been running for a while has millions of keys committed, of which one
transaction touches a few thousand. To measure that without counting millions of words first,
``seed`` writes what such a topology leaves behind straight into the provider, through the
stored-image API (``KeyValueState.replace_stored``; see ``providers/_base.py``):

- each counter task's namespace (``<name>/count-<t>``) gets the filler keys ``seed-<i>`` =
  ``i`` of the key groups it owns (``statefulbolts.keygroups``: where the counter's fields
  grouping would have put them), committed at ``SAVED_TXID``. Filler keys never collide with
  corpus words (those have no digits), and no word the topology counts is among them;
- the stored shape (``<name>/$shape``) records the counter as the topology declares it, so the
  run starts on state of its own shape and moves nothing;
- the checkpoint spout's namespace gets ``COMMITTED(SAVED_TXID)``, so the topology starts by
  recovering (``INITSTATE(SAVED_TXID)``), then runs ``PREPARE`` / ``COMMIT`` from
  ``SAVED_TXID + 1``.

``check`` then reads every counter namespace once, streaming (constant memory beyond the corpus
words): the corpus words' counts must be exact, and every filler key still there with its value.
``drop`` empties the topology's namespaces again (the same API, with an empty image).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

from checkpoint import TX_STATE_KEY, CheckPointState, TxPhase
from providers import KeyValueState, StateFactory, resolve_serializers
from providers._config import parse_provider_config
from statefulbolts import validate_config
from statefulbolts.keygroups import KeyGroups
from statefulbolts.namespaces import TaskNamespace, checkpoint_namespace, topology_prefix
from statefulbolts.state import (
    ComponentShape,
    Partitioning,
    StoredShape,
    serializers_of,
    shape_namespace,
    write_shape,
)

SAVED_TXID = 41
SEED_PREFIX = "seed-"
COUNTER = "count"  # the counting bolt's component id in the benchmark topologies


def namespaces(name: str, parallelism: int, component: str = COUNTER) -> list[str]:
    """The tasks' namespaces of a component (the counter) of topology ``name``."""
    return [str(TaskNamespace.of_topology(name, component, task)) for task in range(parallelism)]


def _kv(namespace: str, conf: Mapping[str, Any], system: bool = False) -> KeyValueState:
    get = StateFactory.get_system_state if system else StateFactory.get_state
    state = get(namespace, conf)
    if not isinstance(state, KeyValueState):
        msg = f"the provider returned {type(state).__qualname__}, not a KeyValueState"
        raise TypeError(msg)
    return state


def _groups(conf: Mapping[str, Any]) -> KeyGroups:
    return KeyGroups(validate_config(conf).state_max_parallelism)


def owner(conf_groups: KeyGroups, i: int, parallelism: int) -> int:
    """The counter task that holds filler key ``i``: the owner of its key group."""
    return conf_groups.owner(conf_groups.group_of(f"{SEED_PREFIX}{i}"), parallelism)


def shares(conf: Mapping[str, Any], keys: int, parallelism: int) -> list[array[int]]:
    """The filler indexes of each counter task (one pass; 8 bytes a key)."""
    groups = _groups(conf)
    out = [array("q") for _ in range(parallelism)]
    for i in range(keys):
        out[owner(groups, i, parallelism)].append(i)
    return out


def seed(conf: Mapping[str, Any], name: str, keys: int, parallelism: int) -> float:
    """Commit ``keys`` filler keys over the counter tasks, save ``COMMITTED``; the seconds taken.

    With ``keys`` 0 nothing is written: the topology starts from nothing, as a new one does.
    """
    if keys <= 0:
        return 0.0
    started = time.perf_counter()
    key_ser, value_ser = resolve_serializers(parse_provider_config(conf), conf)
    pack_key, pack_value = key_ser.serialize, value_ser.serialize

    def image(indexes: array[int]) -> Iterator[tuple[bytes, bytes]]:
        for i in indexes:
            yield pack_key(f"{SEED_PREFIX}{i}"), pack_value(i)

    per_task = shares(conf, keys, parallelism)
    for task, namespace in enumerate(namespaces(name, parallelism)):
        _kv(namespace, conf).replace_stored(SAVED_TXID, image(per_task[task]), None, {})
    shape = ComponentShape(
        parallelism,
        Partitioning.KEYED,
        key_groups=_groups(conf).count,
        key_arity=1,
        serializers=serializers_of(conf),
    )
    prefix = topology_prefix(name)
    write_shape(_kv(shape_namespace(prefix), conf, system=True), StoredShape({COUNTER: shape}))
    spout = _kv(checkpoint_namespace(prefix), conf, system=True)
    spout.put(TX_STATE_KEY, CheckPointState(SAVED_TXID, TxPhase.COMMITTED).to_value())
    spout.commit()
    return time.perf_counter() - started


def check(
    conf: Mapping[str, Any],
    name: str,
    parallelism: int,
    expected: Mapping[str, int],
    keys: int,
) -> dict[str, Any]:
    """Whether the counters hold exactly ``expected`` plus the ``keys`` seeded filler keys.

    Returns ``exact`` and what was found: ``state_keys`` (all keys over the tasks),
    ``wrong_words`` (corpus words with a wrong or missing count, or a key that is neither a
    word nor a filler), ``wrong_seeds`` (filler keys missing, moved or changed), a few examples.
    """
    counts: dict[Any, Any] = {}
    total = wrong_seeds = 0
    examples: list[str] = []
    groups = _groups(conf)
    sizes = [len(indexes) for indexes in shares(conf, keys, parallelism)]
    for task, namespace in enumerate(namespaces(name, parallelism)):
        seeds = 0
        for key, value in _kv(namespace, conf):
            total += 1
            if isinstance(key, str) and key.startswith(SEED_PREFIX):
                seeds += 1
                i = int(key[len(SEED_PREFIX) :])
                if owner(groups, i, parallelism) != task or value != i:
                    wrong_seeds += 1
                    if len(examples) < 5:
                        examples.append(f"{namespace}: {key!r} = {value!r}")
            elif key in counts:  # a word counted by two tasks
                counts[key] = None
            else:
                counts[key] = value
        if seeds != sizes[task]:
            wrong_seeds += abs(sizes[task] - seeds)
            examples.append(f"{namespace}: {seeds} filler keys, expected {sizes[task]}")
    wrong = [w for w in set(expected) | set(counts) if counts.get(w) != expected.get(w)]
    examples += [f"{w!r}: {counts.get(w)} counted, {expected.get(w)} expected" for w in wrong[:5]]
    return {
        "exact": not wrong and not wrong_seeds and total == keys + len(expected),
        "state_keys": total,
        "expected_state_keys": keys + len(expected),
        "wrong_words": len(wrong),
        "wrong_seeds": wrong_seeds,
        "examples": examples[:5],
    }


def drop(
    conf: Mapping[str, Any], name: str, parallelism: int, components: tuple[str, ...] = (COUNTER,)
) -> None:
    """Empty every namespace of topology ``name``, through the stored-image API.

    ``replace_stored`` with nothing leaves a namespace holding nothing (its Redis keys deleted,
    its in-memory image emptied), so a long sweep does not keep each run's state.
    ``components``: the stateful ones (the counter; a sink holding staged records).
    """
    prefix = topology_prefix(name)
    records = [checkpoint_namespace(prefix), shape_namespace(prefix)]
    tasks = [ns for c in components for ns in namespaces(name, parallelism, c)]
    for namespace in [*tasks, *records]:
        _kv(namespace, conf).replace_stored(None, iter(()), None, {})
