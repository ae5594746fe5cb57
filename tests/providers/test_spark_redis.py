"""End to end on local Spark with Redis state: the word count against a real redis-server.

Every assertion reads Redis itself (``HGETALL`` of Storm's layout, decoded by hand from the
documented envelope: msgpack ``[1, msgpack(value)]``), not only the provider's view of it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
from redis_fixtures import free_port

from examples import wordcount
from examples.wordcount import build, expected_counts
from providers import StateBackendError

pytestmark = [pytest.mark.spark, pytest.mark.redis]

PROVIDER = "providers.redis.RedisKeyValueStateProvider"
SENTENCES = 120
TIMEOUT = 60
CHECKPOINT = "$checkpointspout-0"


def redis_conf(port: int) -> dict[str, Any]:
    """The example's conf (examples/conf/redis.json) pointed at ``port``."""
    conf = json.loads(Path(wordcount.__file__).with_name("conf").joinpath("redis.json").read_text())
    pool = json.loads(conf["topology.state.provider.config"])
    pool["jedisPoolConfig"]["port"] = port
    conf["topology.state.provider.config"] = json.dumps(pool)
    conf["topology.state.checkpoint.interval.ms"] = 100
    return conf


def decode_hash(raw: dict[bytes, bytes]) -> dict[Any, Any]:
    """A committed hash as ``{key: value}``: msgpack keys, ``[1, payload]`` envelopes."""
    decoded: dict[Any, Any] = {}
    for field, envelope in raw.items():
        tag, payload = msgpack.unpackb(envelope, raw=False)
        assert tag == 1, f"field {field!r} holds a tombstone or an unknown tag {tag!r}"
        decoded[msgpack.unpackb(field, raw=False)] = msgpack.unpackb(payload, raw=False)
    return decoded


def topology_keys(name: str, parallelism: int = 2) -> set[bytes]:
    """Every key a finished word count ``name`` leaves in Redis (nothing prepared).

    The count tasks, the checkpoint spout's record, the stored shape (``$shape``) and the
    driver's lease (its record, epoch counter and holders, hash-tagged by the topology).
    """
    bases = [f"{name}/count-{t}" for t in range(parallelism)]
    bases += [f"{name}/{CHECKPOINT}", f"{name}/$shape"]
    lease = {f"{{{name}/}}${what}".encode() for what in ("lease", "epoch", "leases")}
    return {k.encode() for base in bases for k in (base, f"{base}$txid")} | lease


def counts_in_redis(client: Any, name: str, parallelism: int = 2) -> dict[str, int]:
    """The committed counts of every ``count`` task, merged; asserts each word is in one task."""
    merged: dict[str, int] = {}
    for task in range(parallelism):
        part = decode_hash(client.hgetall(f"{name}/count-{task}"))
        assert not set(part) & set(merged), "fields grouping put a word in two tasks"
        merged.update(part)
    return merged


def last_commit(transactions: list[dict[str, Any]]) -> int:
    return max(t["txid"] for t in transactions if t["action"] == "COMMIT")


def assert_chain(transactions: list[dict[str, Any]], start: int) -> list[int]:
    """INITSTATE(start), then PREPARE(t) / COMMIT(t) for t = start + 1, ...; returns the txids."""
    assert all(t["ok"] for t in transactions), transactions
    actions = [(t["action"], t["txid"]) for t in transactions]
    assert actions[0] == ("INITSTATE", start)
    commits = [txid for action, txid in actions if action == "COMMIT"]
    assert commits == list(range(start + 1, start + 1 + len(commits)))
    assert commits, actions
    assert actions[1:] == [pair for t in commits for pair in (("PREPARE", t), ("COMMIT", t))]
    return commits


def assert_committed_layout(
    client: Any, name: str, txid: int, parallelism: int = 2, epoch: int = 1
) -> None:
    """Nothing prepared anywhere; every count task committed ``txid``; the spout saved it.

    Every namespace's record carries the lease epoch of the driver that wrote it (``epoch``:
    the first run of a name is epoch 1, each run after takes the next).
    """
    assert not client.keys(f"{name}/*$prepare")
    spout = f"{name}/{CHECKPOINT}"
    saved = decode_hash(client.hgetall(spout))
    assert saved.keys() == {"__state", "__txn", "__txstart"}
    assert saved["__state"] == [txid, "COMMITTED"]
    # Every transaction's timestamp (``checkpoint._txstart``): each task's state records the
    # last one's with its commit (state TTL is judged at it).
    assert saved["__txstart"]["txid"] == txid
    time = str(int(saved["__txstart"]["time_ms"])).encode()
    for task in range(parallelism):
        record = client.hgetall(f"{name}/count-{task}$txid")
        assert record == {b"commit": str(txid).encode(), b"time": time, b"epoch": b"%d" % epoch}
    # The manifest of the last transaction: the sentence indices it carried, each once.
    assert saved["__txn"]["txid"] == txid
    ((component, task, msgs),) = saved["__txn"]["spouts"]
    assert (component, task) == ("sentences", 0)
    assert msgs and len(set(msgs)) == len(msgs)
    # The spout's own save is a commit without txid: Redis records -1 and never a prepare.
    assert client.hgetall(f"{spout}$txid") == {b"commit": b"-1", b"epoch": b"%d" % epoch}


def run(cluster: Any, name: str, conf: dict[str, Any], sentences: int) -> dict[str, Any]:
    handle = cluster.submit_topology(name, conf, build(sentences))
    try:
        handle.await_idle(TIMEOUT)
        result = {"counts": handle.read_state("count"), **handle.metrics()}
    finally:
        handle.kill()
    return result


def test_wordcount_counts_live_in_redis(cluster: Any, redis_db: Any) -> None:
    client = redis_db.client()
    result = run(cluster, "wc", redis_conf(redis_db.port), SENTENCES)

    expected = dict(expected_counts(SENTENCES))
    assert counts_in_redis(client, "wc") == expected
    assert result["counts"] == expected
    assert set(client.keys("*")) == topology_keys("wc")
    commits = assert_chain(result["transactions"], -1)
    assert_committed_layout(client, "wc", commits[-1])


def test_example_main_on_redis(spark: Any, redis_db: Any, tmp_path: Path, capsys: Any) -> None:
    conf_file = tmp_path / "redis.json"
    conf_file.write_text(json.dumps(redis_conf(redis_db.port)))

    status = wordcount.main(["--conf", str(conf_file), "--sentences", "300", "--json"], spark=spark)

    out = json.loads(capsys.readouterr().out)
    expected = expected_counts(300)
    assert status == 0
    assert out["exact"] is True
    assert out["mismatched"] == []
    assert out["words"] == sum(expected.values())
    assert out["distinct_words"] == len(expected)
    assert out["continued_from_words"] == 0
    namespaces = ["wordcount/count-0", "wordcount/count-1", f"wordcount/{CHECKPOINT}"]
    assert out["state"]["provider"] == PROVIDER
    assert list(out["state"]["namespaces"]) == namespaces
    assert all(f"127.0.0.1:{redis_db.port}" in v for v in out["state"]["namespaces"].values())
    # The checkpoint spout's state reads as what it is: the saved txid and phase.
    checkpoint = out["state"]["namespaces"][f"wordcount/{CHECKPOINT}"]
    assert checkpoint.startswith("checkpoint COMMITTED(") and "phase COMMITTED" in checkpoint
    assert "committed_txid" not in json.dumps(out["state"])
    client = redis_db.client()
    assert counts_in_redis(client, "wordcount") == dict(expected)
    assert set(client.keys("*")) == topology_keys("wordcount")


def test_a_users_value_class_never_reads_the_frameworks_records(
    cluster: Any, redis_db: Any
) -> None:
    # keyClass / valueClass are the user's (README: valid for the counts); the checkpoint
    # spout's [txid, phase] and its manifest must not be read back through them. The second
    # run used to die with "'str' object cannot be interpreted as an integer".
    conf = redis_conf(redis_db.port)
    provider = json.loads(conf["topology.state.provider.config"])
    conf["topology.state.provider.config"] = json.dumps(
        {**provider, "keyClass": "str", "valueClass": "int"}
    )
    first = run(cluster, "wc-classes", conf, SENTENCES)
    second = run(cluster, "wc-classes", conf, SENTENCES)

    assert first["counts"] == dict(expected_counts(SENTENCES))
    doubled = {word: 2 * n for word, n in expected_counts(SENTENCES).items()}
    assert second["counts"] == doubled
    assert counts_in_redis(redis_db.client(), "wc-classes") == doubled
    commits = assert_chain(second["transactions"], last_commit(first["transactions"]))
    saved = decode_hash(redis_db.client().hgetall(f"wc-classes/{CHECKPOINT}"))["__state"]
    assert saved == [commits[-1], "COMMITTED"]


def test_second_run_continues_from_committed_counts(cluster: Any, redis_db: Any) -> None:
    client = redis_db.client()
    conf = redis_conf(redis_db.port)
    first = run(cluster, "wc-again", conf, SENTENCES)
    first_txid = last_commit(first["transactions"])
    assert_committed_layout(client, "wc-again", first_txid)

    second = run(cluster, "wc-again", conf, SENTENCES)

    doubled = {word: 2 * n for word, n in expected_counts(SENTENCES).items()}
    assert counts_in_redis(client, "wc-again") == doubled
    assert second["counts"] == doubled
    # Recovery from the saved COMMITTED(t): INITSTATE(t), then PREPARE(t + 1) onwards.
    commits = assert_chain(second["transactions"], first_txid)
    assert commits[0] == first_txid + 1
    assert_committed_layout(client, "wc-again", commits[-1], epoch=2)
    assert set(client.keys("*")) == topology_keys("wc-again")


def test_two_topologies_with_the_same_components_keep_apart(cluster: Any, redis_db: Any) -> None:
    client = redis_db.client()
    conf = redis_conf(redis_db.port)
    # "wc" is a prefix of "wc-2": the namespaces must still not overlap.
    sizes = {"wc": 80, "wc-2": 130}
    handles = {name: cluster.submit_topology(name, conf, build(n)) for name, n in sizes.items()}
    try:
        for handle in handles.values():
            handle.await_idle(TIMEOUT)
        txids = {name: last_commit(h.metrics()["transactions"]) for name, h in handles.items()}
    finally:
        for handle in handles.values():
            handle.kill()

    for name, n in sizes.items():
        mine = set(client.keys(f"{name}/*")) | set(client.keys(f"{{{name}/}}*"))
        assert mine == topology_keys(name)
        assert counts_in_redis(client, name) == dict(expected_counts(n))
        assert_committed_layout(client, name, txids[name])
    assert set(client.keys("*")) == topology_keys("wc") | topology_keys("wc-2")


def test_unreachable_redis_fails_submit_promptly(cluster: Any) -> None:
    port = free_port()
    conf = redis_conf(port)

    for _attempt in range(2):  # a failed submit leaves nothing registered under the name
        started = time.monotonic()
        with pytest.raises(StateBackendError) as info:
            cluster.submit_topology("wc-down", conf, build(10))
        assert time.monotonic() - started < 30
        message = str(info.value)
        assert f"127.0.0.1:{port}" in message
        assert "could not be reached" in message
        # The first thing a start does: take the topology's lease.
        assert message.startswith("topology 'wc-down': taking its lease: ")


def test_example_main_stops_at_once_without_redis(tmp_path: Path, capsys: Any) -> None:
    port = free_port()
    conf_file = tmp_path / "redis.json"
    conf_file.write_text(json.dumps(redis_conf(port)))

    started = time.monotonic()
    status = wordcount.main(["--conf", str(conf_file), "--json"])

    assert time.monotonic() - started < 30
    assert status == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("python -m examples.wordcount: error: Redis at 127.0.0.1:")
    assert f"127.0.0.1:{port} could not be reached" in captured.err
    assert "'wordcount/*'" in captured.err  # the example first lists what the store holds
