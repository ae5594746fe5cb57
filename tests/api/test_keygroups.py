"""Key groups: stable hashing, contiguous ranges, and fields grouping routing by group owner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from statefulbolts import BasicBolt, Fields, Spout, TopologyBuilder
from statefulbolts.errors import TopologyError
from statefulbolts.keygroups import KeyGroups, component_key_groups, key_hash, stable_hash
from statefulbolts.runtime._plan import ExecutionPlan, Router


@pytest.mark.parametrize(
    ("count", "parallelism"),
    [(c, p) for c in (1, 7, 128, 1000) for p in (1, 2, 3, 5, 7) if p <= c],
)
def test_each_task_owns_a_contiguous_range_and_the_ranges_cover_every_group(count, parallelism):
    groups = KeyGroups(count)
    ranges = [groups.task_range(t, parallelism) for t in range(parallelism)]
    assert [g for r in ranges for g in r] == list(range(count))
    assert all(len(r) >= 1 for r in ranges)
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1
    owners = groups.owners(parallelism)
    for task, r in enumerate(ranges):
        assert {owners[g] for g in r} == {task}


def test_more_tasks_than_groups_is_refused():
    with pytest.raises(ValueError, match="above the 4 key groups"):
        KeyGroups(4).owners(5)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, 40000])
def test_a_bad_group_count_is_refused(bad):
    with pytest.raises(ValueError, match="key groups must be an int"):
        KeyGroups(bad)


def test_the_hash_is_the_same_in_another_process_with_another_hash_seed():
    code = (
        "from statefulbolts.keygroups import stable_hash;"
        "print([stable_hash((k,)) for k in ['storm', 'spark', 42, b'x']], "
        "stable_hash(['a', 1]))"
    )
    here = f"{[stable_hash((k,)) for k in ['storm', 'spark', 42, b'x']]} {stable_hash(['a', 1])}"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == here


def test_similar_keys_spread_over_tasks():
    # CRC-32 alone put "w0" .. "w6" in one half of 128 groups: the mix spreads them.
    groups = KeyGroups(128)
    owners = Counter(groups.owner(groups.group_of(f"w{i}"), 2) for i in range(7))
    assert set(owners) == {0, 1}
    spread = Counter(groups.owner(groups.group_of(i), 4) for i in range(20_000))
    assert min(spread.values()) > 4_500


def test_a_state_key_hashes_as_the_grouped_values_it_was_written_for():
    assert key_hash("storm") == stable_hash(("storm",))
    assert key_hash(("user", 7), arity=2) == stable_hash(["user", 7])
    assert key_hash(["user", 7], arity=2) == stable_hash(["user", 7])
    with pytest.raises(ValueError, match="not a sequence of 2 values"):
        key_hash("user", arity=2)


class _Words(Spout):
    def next_tuple(self):
        return None

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "n"))


class _Sink(BasicBolt):
    def execute(self, tup, collector):
        return None

    def declare_output_fields(self, declarer):
        return None


def _topology(parallelism: int, groups: int | None = None):
    builder = TopologyBuilder()
    builder.set_spout("words", _Words())
    declarer = builder.set_bolt("by-word", _Sink(), parallelism).fields_grouping(
        "words", Fields("word")
    )
    if groups is not None:
        declarer.add_configuration("topology.state.max.parallelism", groups)
    builder.set_bolt("by-both", _Sink(), parallelism).fields_grouping(
        "words", Fields("word", "n")
    )
    return builder.create_topology()


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_fields_grouping_sends_a_key_to_the_owner_of_its_group(parallelism):
    topology = _topology(parallelism)
    groups = KeyGroups(128)
    plan = ExecutionPlan(topology, key_groups={"by-word": 128, "by-both": 128})
    spout = plan.index["words"]
    router = Router(plan, spout, 0)
    stream = plan.stream_index[spout]["default"]
    by_word, by_both = plan.index["by-word"], plan.index["by-both"]
    for i in range(200):
        word = f"word{i}"
        targets = dict(router.targets(spout, stream, [word, i]))
        assert targets[by_word] == groups.owner(groups.group_of(word), parallelism)
        assert targets[by_both] == groups.owner(groups.group_of((word, i), 2), parallelism)


def test_component_key_groups_reads_the_component_setting_and_refuses_too_many_tasks():
    topology = _topology(3, groups=16)
    found = component_key_groups(topology.components, 128, stateful={"by-word"})
    assert found["by-word"] == 16 and found["by-both"] == 128
    with pytest.raises(TopologyError, match="'by-both' has parallelism 3, above its 2 key groups"):
        component_key_groups(topology.components, 2, stateful={"by-both"})
    # A bolt without state gets one group per task instead.
    assert component_key_groups(topology.components, 2, stateful=set())["by-both"] == 3

