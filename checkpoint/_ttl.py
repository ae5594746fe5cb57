"""State time-to-live in the checkpoint protocol: each bolt's TTL, at its transaction's time.

Expiry is judged against the transaction's timestamp, never the clock at a read (the rules are
in ``providers._ttl``). The driver fixes that timestamp once per transaction, when PREPARE(t)
first starts, and saves it with PREPARING(t) (``checkpoint._txstart``, with the transaction's
tick tuples): every attempt and replay of ``t``, after a driver restart too, reads and expires
exactly the keys the first attempt did.

1. Every job of ``t`` carries the timestamp (``CheckpointTaskProgram.started_ms``) and the TTL
   of each stateful component that has one (``component_ttls``); a stateful task sets both on
   its state before the bolt's first read.
2. The state stores the timestamp with the prepare; COMMIT(t) cleans up at it, so a COMMIT the
   driver runs itself (``CheckpointJobs.commit_here``) needs nothing more.

A bolt's TTL is configuration only: ``topology.state.ttl.secs`` and
``topology.state.ttl.refresh`` in the topology config, overridden per component by the
bolt's ``get_component_configuration()``, itself overridden by ``add_configuration`` on its
declarer. Known before the task starts, it is validated on the driver when the topology is
submitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from providers import StateTtl, TtlRefresh
from statefulbolts.config import Config, read_setting
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.topology import StormTopology

__all__ = ["component_ttls"]

_TTL_KEYS = (Config.TOPOLOGY_STATE_TTL_SECS, Config.TOPOLOGY_STATE_TTL_REFRESH)


def component_ttls(topology: StormTopology, conf: Mapping[str, Any]) -> dict[str, StateTtl]:
    """The TTL of each stateful component that has one (see the module docstring).

    Raises:
        TopologyError: a component's setting is not allowed (names the component, the key, what
            is allowed and what was given).
    """
    ttls: dict[str, StateTtl] = {}
    for cid, spec in topology.components.items():
        if not spec.is_stateful:
            continue
        own = spec.obj.get_component_configuration() or {}
        layers = (spec.conf, own, conf)
        setting = {
            key: next((c[key] for c in layers if c.get(key) is not None), None) for key in _TTL_KEYS
        }
        try:
            secs = read_setting(setting, Config.TOPOLOGY_STATE_TTL_SECS)
            refresh = read_setting(setting, Config.TOPOLOGY_STATE_TTL_REFRESH)
        except ConfigError as exc:
            msg = f"component {cid!r}: {exc}"
            raise TopologyError(msg) from exc
        if secs is not None:
            ttls[cid] = StateTtl(max(1, round(secs * 1000)), TtlRefresh(refresh))
    return ttls
