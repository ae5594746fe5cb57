"""``statefulbolts sink``: what a topology's exactly-once sinks hold, and freeing their targets.

    statefulbolts sink status --conf FILE --topology NAME --topology-module MODULE:ATTR
                              [--component ID] [--json]
    statefulbolts sink abort-lingering --conf FILE --topology NAME --topology-module MODULE:ATTR
                              [--component ID] [--json]

``status``: per sink task, the last txid its lane published (the lane's marker in the target),
and what it holds staged: per lane, the txids, records and bytes, and how many records are
above the marker (not published yet); then the lanes the target keeps a marker of that no
task holds records of (another parallelism's), for targets that can list them (Kafka,
PostgreSQL). Published records stay staged until the next PREPARE
deletes them; records above the marker are a transaction not yet committed, or one a start
settled without the sink's hook, which the next COMMIT publishes first.

``abort-lingering`` (Kafka sinks): fences every ``transactional.id`` of the sink's lanes (the
lanes its tasks hold records of, those of its current parallelism, and every lane the cluster
knows a marker group of), which aborts a transaction a producer left open when something
outside the protocol killed it. Nothing the protocol does leaves one open for longer than
until the lane's next publish; this is for a lane that will not publish again soon (a
topology stopped for good, a parallelism given up). Safe while the topology runs: a publish
step it fences fails and its COMMIT is tried again, which publishes what it had to.

The topology's module is needed to know its sinks, their targets and settings. Exit status:
0 done; 1 a sink or its target failed; 2 bad input (arguments, config, a sink that keeps no
transactions, the in-memory provider).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from statefulbolts._load import load_topology
from statefulbolts.config import Config, load_config_file
from statefulbolts.connectors.kafka import KafkaSink
from statefulbolts.connectors.sinks import (
    Lane,
    SinkConfigError,
    SinkTaskStatus,
    sink_bolts,
    sink_status,
    target_lanes,
)
from statefulbolts.errors import ConfigError
from statefulbolts.topology import StormTopology

__all__ = ["add_sink_commands"]


def _loaded(args: argparse.Namespace) -> tuple[Config, StormTopology]:
    conf = Config(load_config_file(args.conf))
    topology = load_topology(args.topology_module)
    if not isinstance(topology, StormTopology):
        msg = f"{args.topology_module}: sinks are bolts of a checkpointed topology"
        raise ConfigError(msg)
    if not sink_bolts(topology):
        msg = f"{args.topology_module}: the topology has no ExactlyOnceSinkBolt"
        raise ConfigError(msg)
    return conf, topology


def _size(n: int) -> str:
    return (
        f"{n} B"
        if n < 1024
        else f"{n / 1024:.1f} KiB"
        if n < 1 << 20
        else f"{n / (1 << 20):.1f} MiB"
    )


def _cmd_status(args: argparse.Namespace) -> int:
    conf, topology = _loaded(args)
    tasks = sink_status(conf, args.topology, topology, args.component)
    in_target = target_lanes(conf, args.topology, topology, args.component)
    if args.json:
        doc = {
            "topology": args.topology,
            "tasks": [t.as_dict() for t in tasks],
            "target_lanes": in_target,
        }
        print(json.dumps(doc))
        return 0
    for cid in dict.fromkeys(t.component for t in tasks):
        parallelism = topology.component(cid).parallelism
        of_component = [t for t in tasks if t.component == cid]
        print(
            f"sink {cid!r} of topology {args.topology!r}: {of_component[0].sink}, "
            f"parallelism {parallelism}"
        )
        for t in of_component:
            _print_task(t)
        held = {lane.lane for t in of_component for lane in t.lanes}
        for lane, marker in (in_target.get(cid) or {}).items():
            if lane not in held:
                print(
                    f"  lane {lane} (no task holds records of it): published up to txid "
                    f"{_txid(marker)}"
                )
    return 0


def _print_task(t: SinkTaskStatus) -> None:
    own = (
        f"lane {t.own_lane} last published txid {_txid(t.last_published_txid)}"
        if t.own_lane
        else "no task of the current parallelism"
    )
    print(
        f"  task {t.task}: {own}; staged {_size(t.staged_bytes)}, unpublished records "
        f"{t.unpublished_records}"
    )
    for lane in t.lanes:
        if not lane.staged_records:
            continue
        txids = ", ".join(map(str, lane.staged_txids))
        print(
            f"    lane {lane.lane}: txids {txids}: {lane.staged_records} records, "
            f"{_size(lane.staged_bytes)}; published up to txid {_txid(lane.marker)}, "
            f"{lane.unpublished_records} above it"
        )


def _txid(txid: int | None) -> str:
    return "none" if txid is None else str(txid)


def _cmd_abort_lingering(args: argparse.Namespace) -> int:
    conf, topology = _loaded(args)
    tasks = sink_status(conf, args.topology, topology, args.component)
    fenced: dict[str, list[str]] = {}
    for cid, bolt in sink_bolts(topology).items():
        if args.component is not None and cid != args.component:
            continue
        sink = bolt.sink
        if not isinstance(sink, KafkaSink):
            msg = f"sink {cid!r} ({sink.name}) keeps no transactions open: nothing to abort"
            raise SinkConfigError(msg)
        parallelism = topology.component(cid).parallelism
        names = {Lane(args.topology, cid, t, parallelism).name for t in range(parallelism)}
        names |= {lane.lane for t in tasks if t.component == cid for lane in t.lanes}
        names |= set(sink.lane_markers(conf, args.topology, cid))
        lanes = [Lane(args.topology, cid, *Lane.parse_name(n)) for n in sorted(names)]
        fenced[cid] = sink.abort_lingering(conf, lanes)
    if args.json:
        print(json.dumps({"topology": args.topology, "fenced": fenced}))
        return 0
    for cid, ids in fenced.items():
        print(
            f"sink {cid!r}: fenced {len(ids)} transactional ids; any transaction they left "
            "open is aborted"
        )
        for tid in ids:
            print(f"  {tid}")
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conf", required=True, help="JSON or YAML file: the provider, kafka.*")
    parser.add_argument("--topology", required=True, help="the topology's name")
    parser.add_argument(
        "--topology-module",
        required=True,
        metavar="MODULE:ATTR",
        help="the topology, to know its sinks",
    )
    parser.add_argument("--component", help="one sink component (default: every sink)")
    parser.add_argument("--json", action="store_true", help="one JSON document")


def add_sink_commands(sub: Any) -> argparse.ArgumentParser:
    """Register ``sink`` and its subcommands on the CLI's subparsers ``sub``."""
    top = sub.add_parser("sink", help="exactly-once sinks: status, abort lingering transactions")
    sink_sub = top.add_subparsers(dest="sink_command", required=True)
    status = sink_sub.add_parser("status", help="per sink task: last published txid, staged bytes")
    _add_common(status)
    status.set_defaults(func=_cmd_status)
    abort = sink_sub.add_parser(
        "abort-lingering", help="fence a Kafka sink's transactional ids, aborting open transactions"
    )
    _add_common(abort)
    abort.set_defaults(func=_cmd_abort_lingering)
    return top
