"""A topology's name is the first part of every namespace it stores: names that collide refused."""

from __future__ import annotations

import pytest

from checkpoint.runner import CheckpointRunner
from examples.wordcount import build
from statefulbolts.errors import TopologyError


@pytest.mark.parametrize("name", ["$transactional", "$shape", ".", "..", "a/b", ""])
def test_a_name_that_would_collide_with_the_framework_s_namespaces_is_refused(name: str) -> None:
    with pytest.raises(TopologyError, match="topology name must be"):
        CheckpointRunner(name, {}, build(10), spark=None)
