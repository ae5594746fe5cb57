"""``statefulbolts`` command line.

    statefulbolts run MODULE:ATTR [--conf FILE] [--name NAME] [--master URL] [--json]
                      [--timeout S] [--ui [PORT] [--exit-when-idle]] [--spark-log LEVEL]
                      [--take-over]
                      [--supervise [--max-restarts N] [--backoff S] [--max-backoff S]]
    statefulbolts checkpoint status|list ...                (see statefulbolts.cli.status)
    statefulbolts transactional status|list ...             (see statefulbolts.cli.status)
    statefulbolts state dump|get|export|import|verify ...   (see statefulbolts.cli.state)
    statefulbolts state shape|evolve|rescale|rename|drop ...
    statefulbolts deadletter list|show|replay|purge ...     (see statefulbolts.cli.deadletter)
    statefulbolts sink status|abort-lingering ...           (see statefulbolts.cli.sink)

``ATTR`` is a ``StormTopology`` or a ``TransactionalTopology`` (or their builder), or a function
called with no arguments that returns one (``examples.wordcount:topology``). ``MODULE`` is
imported with the current directory first on the path, as ``python -m`` does, so
``run my_topology:build`` finds ``./my_topology.py``. The topology runs until it is idle (the
default for finite sources) or until interrupted, printing one line per transaction. ``--ui``
serves the live dashboard and ``/metrics`` while it runs (``statefulbolts.ui``) and prints their
URL; once the topology is idle the dashboard stays up (the topology still running, idle) until
Ctrl-C, unless ``--exit-when-idle``. Spark's own log shows errors only (``--spark-log INFO`` for
more).

One driver per topology: before Spark starts, ``run`` takes the topology's lease in its state
store (``recovery.lease``; durable providers only). While another driver of the topology holds
it, ``run`` is refused at once (exit status 2) with one line naming that driver;
``--take-over`` takes the lease from it instead, and the store refuses the other driver's
writes from then on.

``--supervise`` runs the topology in a child process and restarts it when it crashes (see
``recovery.supervisor``); each restart is logged with the recovery actions the restarted driver
took, and takes the lease over from its crashed predecessor at once (they share a restart
token).

This module is ``run`` and the parser; each other command is a module of this package, which
the parser asks to register its subcommands: ``status``, ``state``, ``deadletter``,
``sink``. The command line sits on top of everything else: it may import both protocols, and
nothing below imports it.

``--timeout S`` counts from the command's start, Spark's start-up included: when it runs out,
``run`` prints one line saying where the topology was, cancels its running jobs (a restart
recovers the transaction as after a crash) and exits 3. A state store that cannot be reached
when the lease is taken, or a sink's target when its settings are checked (a PostgreSQL
server), is exit status 2 (nothing started; ``--supervise`` does not restart it), unless the
driver is a supervised restart (``--restarted``, given by the supervisor): then it is an
outage, exit 1, and restarted again. A closed stdout (``run ... | head -1``)
stops the topology after its running transaction, quietly (``_stdout``).

Exit status: 0 done; 1 the topology failed or crashed; 2 bad input (config, wiring, arguments,
a store not reached at start; never restarted); 3 ``--timeout`` ran out (not restarted); 141
stdout was closed (128 + SIGPIPE, what a shell reports for a Unix tool a closed pipe stopped);
a supervised run returns its last child's status.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import signal
import sys
import threading
import time
import tomllib
import uuid
import warnings
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from providers import FATAL_STATE_ERRORS, ProviderNotFoundError, get_provider, provider_name
from recovery.supervisor import BAD_INPUT_EXIT_CODE, TIMEOUT_EXIT_CODE
from statefulbolts._load import EXAMPLE_SPEC, load_topology
from statefulbolts._output import print_event, print_line
from statefulbolts.cli._stdout import SIGPIPE_EXIT_CODE, Stdout
from statefulbolts.cli.deadletter import add_deadletter_commands
from statefulbolts.cli.sink import add_sink_commands
from statefulbolts.cli.state import add_state_commands
from statefulbolts.cli.status import add_status_commands
from statefulbolts.config import Config, load_config_file, validate_config
from statefulbolts.errors import (
    ConfigError,
    StateBackendError,
    StatefulBoltsError,
    TopologyFailedError,
)
from statefulbolts.partitioned import PartitionedSpout
from statefulbolts.runtime import (
    DEFAULT_SPARK_LOG_LEVEL,
    ENGINES,
    SPARK_LOG_ENV,
    SPARK_LOG_LEVELS,
)

FAILED_EXIT_CODE = 1
# When this command started: ``run --timeout S`` counts from here, Spark's start-up included.
_STARTED = time.monotonic()


def exit_code_for(exc: BaseException) -> int:
    """1 for a failure at run time (worth a restart), 2 for bad input (a restart fails again).

    A ``TopologyFailedError`` or ``StateBackendError`` is a run-time failure unless it was caused
    by bad input (e.g. a spout whose ``open`` rejected its config). A store that refuses or lost
    committed state (``providers.FATAL_STATE_ERRORS``, or a topology stopped by one) is 2 too:
    a restart would meet it again.
    """
    cause: BaseException | None = exc
    runtime = False
    while cause is not None:
        if isinstance(cause, TopologyFailedError) and cause.fatal:
            return BAD_INPUT_EXIT_CODE  # a refusing or damaged store: a restart fails again
        if isinstance(cause, FATAL_STATE_ERRORS):
            return BAD_INPUT_EXIT_CODE
        if isinstance(cause, TopologyFailedError | StateBackendError):
            runtime = True
        elif isinstance(cause, StatefulBoltsError):
            return BAD_INPUT_EXIT_CODE
        cause = cause.__cause__
    return FAILED_EXIT_CODE if runtime else BAD_INPUT_EXIT_CODE


# What ``run`` prints comes from the topology's driver thread (each transaction) and from the
# main thread: every line is written whole (``print_line``), never two on one line.
def _print_transaction(info: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_event({"event": "transaction", **info})
        return
    status = "ok" if info["ok"] else f"FAILED: {info['error']}"
    print_line(
        f"txid {info['txid']:>5} {info['action'] or 'BATCH':<9} tuples {info['tuples']:>7} "
        f"acked {info['acked']:>7} failed {info['failed']:>5} {info['seconds']:6.2f}s {status}"
    )


# How a run ended, as its summary says it (``ended`` of the ``done`` event).
_ENDINGS = {
    "idle": "idle",
    "timeout": "stopped by --timeout",
    "interrupted": "stopped (interrupted)",
}


def _print_done(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_event(summary)
        return
    name = summary["topology"]
    ended = _ENDINGS.get(summary.get("ended", "idle"), str(summary.get("ended")))
    print_line(f"topology {name!r} {ended} after {summary.get('transactions', '?')} transactions")
    for comp, row in sorted(summary["components"].items()):
        cells = ", ".join(f"{k} {int(v)}" for k, v in row.items() if k != "seconds")
        print_line(f"  {comp}: {cells}")


def check_before_spark(
    conf: Mapping[str, Any], *, ui_flag: bool = False, topology: Any = None
) -> None:
    """Refuse, in a moment and before Spark starts, what would fail once it has started.

    The topology config (``validate_config``); the dashboard's optional dependencies when it
    is asked for (``--ui`` or ``topology.ui.port``); the state provider: its class is
    imported and its settings checked (``StateProvider.check_config``), without touching the
    store; the partitioned spouts of ``topology`` (``PartitionedSpout.check_config``: a Kafka
    spout's keys and topics), and its bolts that offer ``check_config`` (a sink bolt: a Kafka
    sink's keys, topics and transaction timeout; a PostgreSQL sink's table, columns and key).
    A missing optional dependency is named with the command that installs it.

    Raises:
        ConfigError: a ``topology.*`` key has a wrong value, or an optional dependency the
            config asks for is not installed.
        StateBackendError: a sink's target could not be reached.
        ProviderConfigError, ProviderNotFoundError: the provider or its config is wrong.
    """
    tc = validate_config(conf)
    if tc.ui_port is not None:
        try:
            import statefulbolts.ui  # noqa: F401 - fails at once, naming the install command
        except ImportError as exc:
            msg = f"{'--ui' if ui_flag else Config.TOPOLOGY_UI_PORT}: {exc}"
            raise ConfigError(msg) from exc
    try:
        provider = get_provider(conf)
    except ProviderNotFoundError as exc:
        missing = _missing_dependency(exc, provider_name(conf))
        if missing is None:
            raise
        msg = f"state provider {provider_name(conf)!r}: {missing}"
        raise ConfigError(msg) from exc
    provider.check_config(conf)
    for spec in getattr(topology, "spouts", {}).values():
        spout = getattr(spec, "obj", None)
        if isinstance(spout, PartitionedSpout):
            spout.check_config(conf)
    for spec in getattr(topology, "bolts", {}).values():
        check = getattr(getattr(spec, "obj", None), "check_config", None)
        if callable(check):  # a sink bolt: its sink's settings, topics and limits
            check(conf)


def _missing_dependency(exc: ProviderNotFoundError, dotted: str) -> str | None:
    """What a provider module that exists failed to import, or ``None`` if it does not exist.

    A provider module that is there but needs an optional package (``providers.redis`` needs
    redis-py) raises an ``ImportError`` saying how to install it, caused by the
    ``ModuleNotFoundError`` of the package.
    """
    error = exc.__cause__
    if not isinstance(error, ImportError):
        return None
    if isinstance(error, ModuleNotFoundError) and dotted.startswith(f"{error.name}."):
        return None  # the provider's own module (or its package) is not there
    missing = error.__cause__
    if isinstance(missing, ModuleNotFoundError) and str(missing) not in str(error):
        return f"{error} ({missing})"
    return str(error)


def _cmd_run(args: argparse.Namespace) -> int:
    if args.supervise:
        from statefulbolts.submitter import check_supervise

        check_supervise()
        return _supervise(args)

    deadline = None if args.timeout is None else _STARTED + args.timeout
    conf = Config(load_config_file(args.conf)) if args.conf else Config()
    if args.ui is not None:
        conf[Config.TOPOLOGY_UI_PORT] = args.ui
    topology = load_topology(args.topology)
    name = args.name or args.topology.partition(":")[0].rsplit(".", 1)[-1]
    try:
        check_before_spark(conf, ui_flag=args.ui is not None, topology=topology)
    except StateBackendError as exc:  # a sink's target away: refused as a store away is
        if args.restarted:
            raise
        print(f"error: {str(exc).rstrip('.')}; nothing started", file=sys.stderr)
        return BAD_INPUT_EXIT_CODE
    if args.spark_log is not None:
        os.environ[SPARK_LOG_ENV] = args.spark_log  # read when the session starts
    out = Stdout()

    def progress(info: Any) -> None:
        out.write(lambda: _print_transaction(info.as_dict(), args.json))

    from statefulbolts._cluster import take_topology_lease

    # Before Spark starts: a second driver of the topology is refused in a moment, and so is
    # a store that cannot be reached (exit status 2, not restarted: nothing ran). A restarted
    # driver meeting the same outage exits 1, so that its supervisor tries again.
    try:
        lease = take_topology_lease(name, conf, topology, take_over=args.take_over)
    except StateBackendError as exc:
        if args.restarted:
            raise
        reason = str(exc).rstrip(".")
        print(f"error: {reason}; nothing started: start the store, or fix --conf", file=sys.stderr)
        return BAD_INPUT_EXIT_CODE
    try:
        cluster = _start_spark(args, deadline)
    except BaseException:
        if lease is not None:
            lease.release()
        raise
    if cluster is None:
        if lease is not None:
            lease.release()
        print(
            f"error: --timeout {args.timeout:g} s ran out while Spark was starting; nothing ran",
            file=sys.stderr,
        )
        return TIMEOUT_EXIT_CODE
    with cluster:
        handle = cluster.submit_topology(
            name, conf, topology, on_transaction=progress, lease=lease
        )
        url = handle.ui_url
        if url is not None:
            event = {"event": "dashboard", "url": url}
            out.write(lambda: print_line(json.dumps(event) if args.json else f"dashboard: {url}"))
        try:
            ended = _until_idle(handle, deadline, out)
        except KeyboardInterrupt:
            ended = "interrupted"
            print("interrupted; stopping after the running transaction", file=sys.stderr)
        if ended == "idle" and url is not None and not args.exit_when_idle:
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: what ends the dashboard
                _serve_until_interrupted(handle, url, args.json, out)
            ended = "closed" if out.closed.is_set() else ended
        if ended == "timeout":
            print(f"error: {_timeout_line(handle, args.timeout)}", file=sys.stderr)
        metrics = handle.metrics()
        handle.kill(wait=ended != "timeout")
    if ended == "closed":
        return SIGPIPE_EXIT_CODE
    summary = {
        "event": "done",
        "topology": name,
        "ended": ended,
        "transactions": len(metrics["transactions"]),
        "components": metrics["components"],
    }
    out.write(lambda: _print_done(summary, args.json))
    if out.closed.is_set():
        return SIGPIPE_EXIT_CODE
    return TIMEOUT_EXIT_CODE if ended == "timeout" else 0


def _start_spark(args: argparse.Namespace, deadline: float | None) -> Any:
    """The cluster ``run`` submits to; ``None`` if ``deadline`` came first (Spark starting).

    Spark's start-up cannot be interrupted: with a deadline it runs on a thread of its own,
    which is left behind when the deadline comes (the JVM dies with this process).
    """
    from statefulbolts.submitter import cluster_for_run  # imports pyspark

    if deadline is None:
        return cluster_for_run(args.master, args.engine)
    started: dict[str, Any] = {}

    def start() -> None:
        try:
            started["cluster"] = cluster_for_run(args.master, args.engine)
        except BaseException as exc:  # noqa: BLE001 - raised again in the main thread
            started["error"] = exc

    thread = threading.Thread(target=start, name="sb-spark-start", daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 0.0))
    if thread.is_alive():
        return None
    if "error" in started:
        raise started["error"]
    return started["cluster"]


# How often ``run`` looks whether stdout was closed while it waits for its topology.
_WAIT_SLICE = 0.1


def _until_idle(handle: Any, deadline: float | None, out: Stdout) -> str:
    """Wait for the topology: ``"idle"``, ``"timeout"`` (``deadline`` came) or ``"closed"``.

    ``"closed"``: stdout's reader went away (``Stdout``).

    Raises:
        TopologyFailedError: (or the error it stopped with) the topology failed.
    """
    while not out.closed.is_set():
        wait = _WAIT_SLICE if deadline is None else min(_WAIT_SLICE, deadline - time.monotonic())
        if wait <= 0:
            return "timeout"
        if handle.wait_idle(wait):
            return "idle"
    return "closed"


def _timeout_line(handle: Any, timeout: float) -> str:
    """Where the topology was when ``--timeout`` ran out, in one line."""
    progress = handle.runner.observe(last=0).progress
    where = [progress.phase]
    if progress.committed_txid is not None:
        where.append(f"last committed txid {progress.committed_txid}")
    if progress.pending_trees is not None:
        where.append(f"{progress.pending_trees} tuple trees pending")
    return (
        f"--timeout {timeout:g} s ran out before topology {handle.name!r} was idle "
        f"({'; '.join(where)}); stopped without waiting for its running transaction"
    )


# How often a dashboard kept up after idle looks whether its topology failed since.
_SERVE_POLL_SECONDS = 0.5


def _serve_until_interrupted(handle: Any, url: str, as_json: bool, out: Stdout) -> None:
    """Keep the idle topology, and its dashboard, up until Ctrl-C (SIGINT) or SIGTERM.

    The topology keeps running: a source that gets more input is processed and shown.

    Raises:
        KeyboardInterrupt: SIGINT or SIGTERM came (the caller stops the topology).
        TopologyFailedError: (or the error it stopped with) the topology failed meanwhile.
    """
    if as_json:
        out.write(lambda: print_event({"event": "idle", "url": url}))
    else:
        text = f"idle; the dashboard stays up at {url} until Ctrl-C (--exit-when-idle: exit)"
        out.write(lambda: print_line(text))

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    wake = threading.Event()  # never set: its wait is a sleep that Ctrl-C interrupts
    try:
        while handle.error is None and not handle.runner.done and not out.closed.is_set():
            wake.wait(_SERVE_POLL_SECONDS)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if handle.error is not None:
        raise handle.error


def _child_command(args: argparse.Namespace, *, first: bool = True) -> list[str]:
    """The ``run`` command line of the supervised child: the same run, always ``--json``.

    ``--take-over`` goes to the first child only: a restarted child takes the lease from its
    crashed predecessor by their shared restart token, never from another driver. A restarted
    child is told it is one (``--restarted``): a store it cannot reach is then an outage to
    wait out by restarting it again (exit status 1), not a wrong config (2).
    """
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", args.topology, "--json"]
    if args.take_over and first:
        cmd.append("--take-over")
    if not first:
        cmd.append("--restarted")
    for flag, value in (
        ("--conf", args.conf),
        ("--name", args.name),
        ("--master", args.master),
        ("--engine", args.engine),
        ("--timeout", args.timeout),
        ("--ui", args.ui),
        ("--spark-log", args.spark_log),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    if args.exit_when_idle:
        cmd.append("--exit-when-idle")
    return cmd


def _supervise(args: argparse.Namespace) -> int:
    from checkpoint.status import RECOVERY_ACTIONS
    from recovery.supervisor import RecoveryActions, RestartPolicy, supervise
    from statefulbolts.transactional import BatchAction

    # The child runs either protocol: a checkpointed one recovers by the checkpoint's actions
    # (a transactional one replays in its normal batches), and either's commit is progress.
    recovery = RECOVERY_ACTIONS | RecoveryActions(progress=[BatchAction.COMMIT])

    # Fail on bad arguments and config here, before any child starts.
    if args.conf:
        load_config_file(args.conf)
    policy = RestartPolicy(args.max_restarts, args.backoff, max(args.max_backoff, args.backoff))

    out = Stdout()

    def on_line(line: str) -> None:
        out.write(lambda: _show_child_line(line))
        if out.closed.is_set():
            raise KeyboardInterrupt  # the reader went away: stop the child, restart nothing

    def _show_child_line(line: str) -> None:
        text = line.rstrip("\n")
        if args.json or not line.startswith("{"):
            print_line(text)
            return
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            print_line(text)
            return
        if event.get("event") == "transaction":
            _print_transaction({k: v for k, v in event.items() if k != "event"}, False)
        elif event.get("event") == "done":
            _print_done(event, False)
        else:
            print_line(text)

    def on_event(event: dict[str, Any]) -> None:
        if out.closed.is_set():
            return  # stopped because the reader went away: nothing to tell it
        if args.json:
            out.write(lambda: print_event(event))
        kind = event["event"]
        if kind == "restart":
            text = (
                f"supervise: driver exited with status {event['exit_code']}; restart "
                f"#{event['restart']} of at most {policy.max_restarts} in "
                f"{event['backoff_seconds']:.1f} s"
            )
        elif kind == "recovered":
            text = (
                f"supervise: restart #{event['restart']} recovered in {event['seconds']:.1f} s "
                f"({event['recovery_seconds']:.2f} s of recovery transactions): "
                f"{', '.join(event['actions'])}"
            )
        else:
            text = (
                f"supervise: finished after {event['restarts']} restart(s) with status "
                f"{event['exit_code']} ({event['reason']})"
            )
        print_line(text, sys.stderr)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # One restart token for every child of this supervisor (``recovery.lease``): a child
    # restarted after a crash takes its predecessor's lease over at once. A token set by the
    # user's own supervisor is kept.
    from recovery.lease import LEASE_TOKEN_ENV

    env = dict(os.environ)
    env.setdefault(LEASE_TOKEN_ENV, f"supervise-{uuid.uuid4().hex}")
    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        status = supervise(
            _child_command(args),
            policy,
            on_line=on_line,
            on_event=on_event,
            recovery=recovery,
            env=env,
            restart_command=_child_command(args, first=False),
        )
        return SIGPIPE_EXIT_CODE if out.closed.is_set() else status
    finally:
        signal.signal(signal.SIGTERM, previous)


def package_version() -> str:
    """This package's version: from its installed metadata, else from the source tree.

    A checkout used without installing has no metadata; its ``pyproject.toml`` (next to the
    package's folder) tells. ``"unknown"`` when neither does.
    """
    try:
        return metadata.version("statefulbolts")
    except metadata.PackageNotFoundError:
        # statefulbolts/cli/__init__.py: the checkout's root is three folders up.
        return _source_version(Path(__file__).resolve().parents[2] / "pyproject.toml")


def _source_version(pyproject: Path) -> str:
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return "unknown"
    if project.get("name") != "statefulbolts":
        return "unknown"
    return str(project.get("version", "unknown"))


def _version_line() -> str:
    try:
        pyspark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pyspark = "not installed"
    return (
        f"statefulbolts {package_version()} (pyspark {pyspark}, "
        f"Python {platform.python_version()})"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="statefulbolts", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=_version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a topology until it is idle")
    run.add_argument(
        "topology",
        help="MODULE:ATTR: a topology, or a function of no arguments returning one "
        f"(e.g. {EXAMPLE_SPEC}); MODULE may be a .py file in the current directory",
    )
    run.add_argument("--conf", help="JSON or YAML file of config keys")
    run.add_argument("--name", help="topology name (default: the module's last part)")
    run.add_argument(
        "--master", help="Spark master (default local[2]; under spark-submit, spark-submit's)"
    )
    run.add_argument(
        "--engine",
        choices=sorted(ENGINES),
        default=None,
        help="what runs the jobs: spark (the default) or inline (every task in this process, "
        "no Spark: the same protocols, for development and tests)",
    )
    run.add_argument("--timeout", type=float, default=None, help="give up after N seconds")
    run.add_argument("--json", action="store_true", help="JSON lines instead of text")
    run.add_argument(
        "--ui",
        nargs="?",
        const=0,
        type=int,
        metavar="PORT",
        help="serve the live dashboard and /metrics on 127.0.0.1:PORT (bare --ui: a free port)",
    )
    run.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="with a dashboard (--ui): exit when the topology is idle; by default the "
        "dashboard stays up until Ctrl-C",
    )
    run.add_argument(
        "--spark-log",
        type=str.upper,
        choices=SPARK_LOG_LEVELS,
        metavar="LEVEL",
        help=f"the level of Spark's own log, one of {', '.join(SPARK_LOG_LEVELS)} (default "
        f"{DEFAULT_SPARK_LOG_LEVEL}; or ${SPARK_LOG_ENV})",
    )
    run.add_argument(
        "--take-over",
        action="store_true",
        help="take the topology's lease from the driver that holds it (that driver is fenced "
        "off: the store refuses its writes, and it stops); without it, a second driver is "
        "refused while the first holds the lease",
    )
    run.add_argument("--restarted", action="store_true", help=argparse.SUPPRESS)
    run.add_argument(
        "--supervise",
        action="store_true",
        help="run in a child process and restart it when it crashes",
    )
    run.add_argument(
        "--max-restarts", type=int, default=5, help="with --supervise: most restarts (default 5)"
    )
    run.add_argument(
        "--backoff",
        type=float,
        default=1.0,
        help="with --supervise: first wait before a restart, doubled each time (default 1 s)",
    )
    run.add_argument(
        "--max-backoff",
        type=float,
        default=30.0,
        help="with --supervise: longest wait before a restart (default 30 s)",
    )
    run.set_defaults(func=_cmd_run)

    add_status_commands(sub)
    add_state_commands(sub)
    add_deadletter_commands(sub)
    add_sink_commands(sub)
    return parser


def _import_from_current_directory() -> None:
    """Put the current directory first on ``sys.path``, as ``python -m`` does.

    The ``statefulbolts`` script's own folder is first there instead, so without this a
    topology module next to the user (``run my_topology:build``) could not be imported.
    """
    cwd = os.getcwd()
    if not any(p in ("", ".") or os.path.abspath(p) == cwd for p in sys.path[:1]):
        sys.path.insert(0, cwd)


class _WarningsOnce:
    """Shows each distinct warning once per command, on one line: ``warning: <what>``.

    The topology config is validated more than once in a run (before Spark starts, and by
    the runtime); Python shows a warning once per place that raised it (even with the
    ``"once"`` action, which keys on the calling module), so an unknown key was shown as
    often as it was validated. This keys on the warning's category and text only.
    """

    def __init__(self) -> None:
        self._shown: set[tuple[type[Warning], str]] = set()
        self._lock = threading.Lock()

    def __call__(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        text = str(message)
        with self._lock:
            if (category, text) in self._shown:
                return
            self._shown.add((category, text))
        # A user warning (ours are kinds of it) is its text; another kind says its name.
        kind = "" if issubclass(category, UserWarning) else f"{category.__name__}: "
        print(f"warning: {kind}{text}", file=file or sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``statefulbolts`` command."""
    args = _parser().parse_args(argv)
    _import_from_current_directory()
    warnings.showwarning = _WarningsOnce()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if getattr(args, "supervise", False) and min(args.max_restarts, args.backoff) < 0:
        print("error: --max-restarts and --backoff must not be negative", file=sys.stderr)
        return BAD_INPUT_EXIT_CODE
    try:
        return int(args.func(args))
    except StatefulBoltsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code_for(exc)
    except BrokenPipeError:  # a reader of stdout went away (``state dump ... | head``)
        Stdout().close()
        return SIGPIPE_EXIT_CODE

