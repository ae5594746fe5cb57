"""``statefulbolts`` command line.

    statefulbolts run MODULE:FUNCTION [--conf FILE] [--name NAME] [--master URL] [--json]

``FUNCTION`` is called with no arguments and returns a ``StormTopology`` (or a
``TopologyBuilder``). The topology runs until it is idle (``--until-idle``, the default for
finite sources) or until interrupted, printing one line per transaction.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from typing import Any

from statefulbolts._config import Config, load_config_file
from statefulbolts._topology import StormTopology, TopologyBuilder
from statefulbolts.errors import StatefulBoltsError, TopologyError


def load_topology(spec: str) -> StormTopology:
    """Import ``module:function`` and call it; it must return a topology or a builder."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        msg = f"expected MODULE:FUNCTION (e.g. examples.wordcount:build), got {spec!r}"
        raise TopologyError(msg)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"cannot import module {module_name!r} for {spec!r}: {exc}"
        raise TopologyError(msg) from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        msg = f"{module_name!r} has no callable {func_name!r}"
        raise TopologyError(msg)
    made = func()
    if isinstance(made, TopologyBuilder):
        made = made.create_topology()
    if not isinstance(made, StormTopology):
        msg = f"{spec} returned {type(made).__name__}; expected a StormTopology or TopologyBuilder"
        raise TopologyError(msg)
    return made


def _cmd_run(args: argparse.Namespace) -> int:
    from statefulbolts.runtime import LocalCluster

    conf = Config(load_config_file(args.conf)) if args.conf else Config()
    topology = load_topology(args.topology)
    name = args.name or args.topology.partition(":")[0].rsplit(".", 1)[-1]

    def progress(info: Any) -> None:
        if args.json:
            print(json.dumps({"event": "transaction", **info.as_dict()}), flush=True)
        else:
            status = "ok" if info.ok else f"FAILED: {info.error}"
            print(
                f"txid {info.txid:>5} {info.action or 'BATCH':<9} tuples {info.tuples:>7} "
                f"acked {info.acked:>7} failed {info.failed:>5} {info.seconds:6.2f}s {status}",
                flush=True,
            )

    with LocalCluster(args.master) as cluster:
        handle = cluster.submit_topology(name, conf, topology, on_transaction=progress)
        try:
            handle.await_idle(args.timeout)
        except KeyboardInterrupt:
            print("interrupted; stopping after the running transaction", file=sys.stderr)
        metrics = handle.metrics()
        handle.kill()
    summary = {"event": "done", "topology": name, "components": metrics["components"]}
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"topology {name!r} idle after {len(metrics['transactions'])} transactions")
        for comp, row in sorted(metrics["components"].items()):
            cells = ", ".join(f"{k} {int(v)}" for k, v in row.items() if k != "seconds")
            print(f"  {comp}: {cells}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``statefulbolts`` command."""
    parser = argparse.ArgumentParser(prog="statefulbolts", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a topology until it is idle")
    run.add_argument("topology", help="MODULE:FUNCTION returning a topology")
    run.add_argument("--conf", help="JSON or YAML file of config keys")
    run.add_argument("--name", help="topology name (default: the module's last part)")
    run.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    run.add_argument("--timeout", type=float, default=None, help="give up after N seconds")
    run.add_argument("--json", action="store_true", help="JSON lines instead of text")
    run.set_defaults(func=_cmd_run)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except StatefulBoltsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
