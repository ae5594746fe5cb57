"""Session timeout: per-user sessions closed by a timer after N idle seconds, counted under a TTL.

Run it::

    python -m examples.sessions                           # 40 users, 10 simulated minutes
    python -m examples.sessions --users 100 --minutes 30 --gap 60 --ttl 300 --json
    python -m examples.sessions --conf examples/conf/redis.json --name sessions-1

The topology::

    events (spout) -> sessions (TimerBolt, by user) -> closed    (every closed session)
                                                    \\-> per_user (closed sessions per user, TTL)

``sessions`` keeps each user's open session (start, last event, events) in its state and, on
each event, deletes the session's processing-time timer and registers a new one at "last event
+ ``--gap`` seconds". When a timer fires the user was idle that long: the session is removed
from the state and emitted as ``[user, start, end, events]`` (``end``: its last event).
``closed`` keeps every session it receives, with how many times it came; ``per_user`` counts
each user's closed sessions under a state TTL of ``--ttl`` seconds (``topology.state.ttl.secs``
on that component only), so a user who stopped closing sessions is forgotten ``--ttl`` seconds
after the last one, and one who comes back after that starts again from 1.

Time is the driver's ``ManualClock``: the example moves it one ``--step`` of seconds each time a
PREPARE succeeds, and the spout sends each event once the clock has reached the event's time.
The events are seeded, each at a whole number of steps (so are the gap and the TTL), which
makes a run exact, whatever the machine's speed:

1. Every clock value has exactly one PREPARE, and it starts at that value (the clock moves at
   the end of a PREPARE; the ``sessions`` bolt's tick tuples, one per step, make sure each new
   value has a transaction); that start is the transaction's processing time and its TTL time.
2. An event is emitted as soon as the clock reaches its time, so it is in the PREPARE that
   starts at its time (events at the very start: in the first PREPARE).
3. A timer at ``last + gap`` fires in the PREPARE that starts then, before that PREPARE's data;
   every event of the user before ``last + gap`` came in an earlier PREPARE (the gap is at
   least two steps). So a session closes exactly when a plain sessionization says it ends, and
   an event at exactly ``last + gap`` starts a new session, as it does there.
4. ``per_user`` writes a user's count in the PREPARE that closed the session, at ``close``
   time; the count expires at ``close + ttl``, and the last commit (at the run's end time)
   deletes every count expired by then.

The clock stops at the end (one gap and a step after the last event), the topology goes idle
and the example prints the closed sessions per user and a verdict: every session closed
exactly once and equal to a plain Python sessionization of the same events; ``per_user`` holds
exactly the users whose last session closed less than ``--ttl`` seconds before the end, each
with the count a plain computation gets (reset by every pause of ``--ttl`` or more); and the
state's committed key count, as the runtime counts it, is that number of users. Exit status 0
if all of that holds, 1 if not, 2 on bad input or an unreachable state store.

With a durable provider (Redis), use a new ``--name`` per run: the verdict is about one run
from empty state, and a name that already holds state is refused.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from providers import get_provider, provider_name
from statefulbolts import (
    Config,
    Fields,
    ManualClock,
    Spout,
    StatefulBolt,
    StatefulBoltsError,
    StormTopology,
    TopologyBuilder,
    is_tick_tuple,
)
from statefulbolts.errors import ConfigError
from statefulbolts.namespaces import topology_prefix
from statefulbolts.ticks import TICK_FREQ_KEY
from statefulbolts.timers import TimeDomain, TimerBolt

START_MS = 1_704_067_200_000  # 2024-01-01 00:00 UTC: the simulated run's start
EVENT_FIELDS = Fields("user", "ts")
SESSION_FIELDS = Fields("user", "start", "end", "events")


# --------------------------------------------------------------------------- the input
class Event(NamedTuple):
    """One user event: who, and when (ms)."""

    user: str
    ts: int


class Session(NamedTuple):
    """A closed session: its user, first and last event (ms), events in it."""

    user: str
    start: int
    end: int
    events: int


@dataclass(frozen=True)
class Settings:
    """The run's times, in ms: the clock's step, the idle gap, the TTL, the simulated span."""

    step_ms: int
    gap_ms: int
    ttl_ms: int
    span_ms: int

    @classmethod
    def of(cls, step: int, gap: int, ttl: int, minutes: float) -> Settings:
        """From seconds (and minutes); ``ValueError`` naming the flag if they do not fit.

        Example:
            >>> Settings.of(step=5, gap=30, ttl=120, minutes=10).gap_ms
            30000
        """
        if step < 1 or gap < 2 * step or gap % step or ttl < step or ttl % step or minutes <= 0:
            msg = (
                "the times must be whole steps: --step >= 1, --gap a multiple of --step and at "
                "least two steps, --ttl a multiple of --step, --minutes > 0; got "
                f"step={step}, gap={gap}, ttl={ttl}, minutes={minutes}"
            )
            raise ValueError(msg)
        span = max(step, int(minutes * 60) // step * step)
        return cls(step * 1000, gap * 1000, ttl * 1000, span * 1000)


def make_events(users: int, settings: Settings, seed: int = 0) -> list[Event]:
    """The seeded events, in time order (ties by user): the same in every process.

    Each user is active over a random part of the span; while active, the next event comes
    after a short pause (within the gap) two times in three, else after a long one (the gap to
    three gaps), so sessions of several events alternate with idle spells.

    Example:
        >>> events = make_events(3, Settings.of(5, 30, 120, 2), seed=1)
        >>> events == make_events(3, Settings.of(5, 30, 120, 2), seed=1)
        True
        >>> all(e.ts % 5000 == 0 for e in events)
        True
    """
    if users < 1:
        msg = f"--users must be at least 1, got {users}"
        raise ValueError(msg)
    rng = random.Random(f"sessions/{seed}")
    step, gap, span = settings.step_ms // 1000, settings.gap_ms // 1000, settings.span_ms // 1000
    events = []
    for n in range(users):
        user = f"user{n:03d}"
        t = rng.randrange(0, span // 2 + 1, step)
        stop = rng.randrange(t, span + 1, step)
        while t <= stop:
            events.append(Event(user, START_MS + t * 1000))
            pause = rng.randrange(step, gap, step) if rng.random() < 2 / 3 else 0
            t += pause or rng.randrange(gap, 3 * gap + 1, step)
    return sorted(events, key=lambda e: (e.ts, e.user))


def sessionize(events: Sequence[Event], gap_ms: int) -> list[Session]:
    """The plain computation: a user's events split wherever they are ``gap_ms`` or more apart.

    Example:
        >>> sessionize([Event("a", 0), Event("a", 20), Event("a", 50), Event("b", 5)], 30)
        [Session(user='a', start=0, end=20, events=2), Session(user='a', start=50, end=50, \
events=1), Session(user='b', start=5, end=5, events=1)]
    """
    by_user: dict[str, list[int]] = {}
    for e in sorted(events, key=lambda e: (e.user, e.ts)):
        by_user.setdefault(e.user, []).append(e.ts)
    sessions = []
    for user, stamps in sorted(by_user.items()):
        start = last = stamps[0]
        count = 1
        for ts in stamps[1:]:
            if ts - last >= gap_ms:
                sessions.append(Session(user, start, last, count))
                start, count = ts, 0
            last, count = ts, count + 1
        sessions.append(Session(user, start, last, count))
    return sessions


def expected_counts(sessions: Sequence[Session], settings: Settings, end_ms: int) -> dict[str, int]:
    """What ``per_user`` holds at ``end_ms``: each user not expired, with their count.

    A session is counted when it closes (``end + gap``); a count not written for ``ttl`` or
    more is gone, so the next session counts 1 again; a user whose last close is ``ttl`` or
    more before ``end_ms`` is gone.
    """
    counts: dict[str, tuple[int, int]] = {}  # user -> (count, last close)
    for s in sorted(sessions, key=lambda s: (s.end, s.user)):
        close = s.end + settings.gap_ms
        count, last = counts.get(s.user, (0, 0))
        counts[s.user] = (1 if close - last >= settings.ttl_ms else count + 1, close)
    return {u: c for u, (c, last) in counts.items() if last + settings.ttl_ms > end_ms}


def end_time(events: Sequence[Event], settings: Settings) -> int:
    """Where the clock stops: one step after the last session closes."""
    return max(e.ts for e in events) + settings.gap_ms + settings.step_ms


# --------------------------------------------------------------------------- the topology
@dataclass
class Source:
    """The events and the clock that releases them, for a ``ClockedEventSpout`` of this process."""

    events: Sequence[Event]
    clock: ManualClock


class ClockedEventSpout(Spout):
    """Emits every event whose time the clock has reached, all of them in one ``next_tuple``.

    The spout is copied for its task, so it finds its source by name in ``SOURCES``, where the
    driver application registers it. Failed events are sent again first.
    """

    SOURCES: ClassVar[dict[str, Source]] = {}

    def __init__(self, source: str) -> None:
        self.source = source

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Find the source."""
        found = self.SOURCES.get(self.source)
        if found is None:
            msg = f"ClockedEventSpout: no source {self.source!r} in this process; register it"
            raise LookupError(msg)
        self.events, self.clock, self.collector = found.events, found.clock, collector
        self.next_index = 0
        self.replay: list[int] = []

    def next_tuple(self) -> None:
        """Replays, then every event due by the clock."""
        replay, self.replay = self.replay, []
        for i in replay:
            self.collector.emit(list(self.events[i]), message_id=i)
        now = self.clock.now_ms()
        while self.next_index < len(self.events) and self.events[self.next_index].ts <= now:
            i = self.next_index
            self.next_index += 1
            self.collector.emit(list(self.events[i]), message_id=i)

    def fail(self, msg_id: Any) -> None:
        """Send ``msg_id`` again."""
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        """``user``, ``ts``."""
        declarer.declare(EVENT_FIELDS)


class SessionTimeout(TimerBolt):
    """Keeps each user's open session; a timer ``gap_ms`` after its last event closes it."""

    def __init__(self, gap_ms: int) -> None:
        self.gap_ms = gap_ms

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The open sessions: ``user -> {"start", "last", "events"}``."""
        self.open_sessions = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Extend the user's session (or open one) and move its timer to the new idle end."""
        if not is_tick_tuple(tuple):
            user, ts = tuple.values
            session = self.open_sessions.get(user)
            if session is None:
                session = {"start": ts, "last": ts, "events": 0}
            else:
                self.timers.delete_processing_time_timer(user, session["last"] + self.gap_ms)
            session = {**session, "last": ts, "events": session["events"] + 1}
            self.open_sessions.put(user, session)
            self.timers.register_processing_time_timer(user, ts + self.gap_ms)
        self.collector.ack(tuple)

    def on_timer(self, key: Any, at_ms: Any, time_domain: TimeDomain, collector: Any) -> None:
        """The user was idle ``gap_ms``: close the session and emit it."""
        session = self.open_sessions.get(key)
        if session is None or session["last"] + self.gap_ms != at_ms:
            return  # not this session's timer (deleted timers never fire; kept as a guard)
        self.open_sessions.delete(key)
        collector.emit([key, session["start"], session["last"], session["events"]])

    def declare_output_fields(self, declarer: Any) -> None:
        """``user``, ``start``, ``end``, ``events``."""
        declarer.declare(SESSION_FIELDS)


class ClosedSessions(StatefulBolt):
    """Keeps every closed session under ``user/start``, with how many times it came (a sink)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The sessions, restored to the last commit."""
        self.sessions = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Store the session; count the times it was emitted."""
        user, start, end, events = tuple.values
        key = f"{user}/{start}"
        before = self.sessions.get(key)
        times = 1 if before is None else before["emitted"] + 1
        self.sessions.put(key, {"end": end, "events": events, "emitted": times})
        self.collector.ack(tuple)


class SessionsPerUser(StatefulBolt):
    """Counts each user's closed sessions, in a state with a TTL (a sink)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The counts; an expired user reads as absent."""
        self.counts = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """One more session for the user (the write moves the user's expiry on)."""
        user = tuple.get_value(0)
        self.counts.put(user, self.counts.get(user, 0) + 1)
        self.collector.ack(tuple)


def build(source: str, settings: Settings, parallelism: int = 2) -> StormTopology:
    """events -> sessions (timers) -> closed, and -> per_user (TTL)."""
    builder = TopologyBuilder()
    builder.set_spout("events", ClockedEventSpout(source), 1)
    # One tick per step, so each new clock value starts a transaction that fires its timers.
    builder.set_bolt("sessions", SessionTimeout(settings.gap_ms), parallelism).fields_grouping(
        "events", Fields("user")
    ).add_configuration(TICK_FREQ_KEY, settings.step_ms // 1000)
    builder.set_bolt("closed", ClosedSessions(), parallelism).fields_grouping(
        "sessions", Fields("user")
    )
    builder.set_bolt("per_user", SessionsPerUser(), parallelism).fields_grouping(
        "sessions", Fields("user")
    ).add_configuration(Config.TOPOLOGY_STATE_TTL_SECS, settings.ttl_ms // 1000)
    return builder.create_topology()


class AdvanceClock:
    """``on_transaction``: one step on the clock per successful PREPARE, until ``end_ms``."""

    def __init__(self, clock: ManualClock, settings: Settings, end_ms: int) -> None:
        self.clock, self.step_ms, self.end_ms = clock, settings.step_ms, end_ms
        self.prepares: list[float] = []  # the clock at the end of each successful PREPARE

    def __call__(self, info: Any) -> None:
        """Move the clock after a PREPARE that succeeded."""
        if info.ok and info.action == "PREPARE":
            now = self.clock.now_ms()
            self.prepares.append(now)
            if now < self.end_ms:
                self.clock.advance(self.step_ms)


# --------------------------------------------------------------------------- the verdict
def verdict(
    events: Sequence[Event],
    settings: Settings,
    end_ms: int,
    closed: Mapping[Any, Any],
    per_user: Mapping[Any, Any],
    counted_keys: int | None,
) -> dict[str, Any]:
    """What the committed state says, against the plain computations."""
    want = {f"{s.user}/{s.start}": s for s in sessionize(events, settings.gap_ms)}
    equal = twice = 0
    wrong: list[str] = []
    for key in sorted(set(want) | set(closed)):
        got, w = closed.get(key), want.get(key)
        if got is not None and got["emitted"] > 1:
            twice += 1
        if got is not None and w is not None and (got["end"], got["events"]) == (w.end, w.events):
            equal += got["emitted"] == 1
        else:
            wrong.append(key)
    want_counts = expected_counts(list(want.values()), settings, end_ms)
    got_counts = {str(u): c for u, c in per_user.items()}
    out: dict[str, Any] = {
        "events": len(events),
        "users": len({e.user for e in events}),
        "sessions_expected": len(want),
        "sessions_closed": len(closed),
        "sessions_equal_once": equal,
        "sessions_emitted_twice": twice,
        "sessions_wrong": wrong[:10],
        "users_alive_expected": len(want_counts),
        "users_alive": len(got_counts),
        "users_expired": len({e.user for e in events}) - len(got_counts),
        "counts_exact": got_counts == want_counts,
        "counts_wrong": sorted(
            u for u in set(want_counts) | set(got_counts) if want_counts.get(u) != got_counts.get(u)
        )[:10],
        "state_keys_counted": counted_keys,
    }
    out["sessions_exact"] = equal == len(want) == len(closed)
    out["exact"] = (
        out["sessions_exact"] and out["counts_exact"] and counted_keys == len(want_counts)
    )
    return out


# --------------------------------------------------------------------------- the run
def main(argv: list[str] | None = None, *, spark: Any = None) -> int:
    """Run the session-timeout topology and check it (on ``spark``, a SparkSession, if given)."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.sessions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--users", type=int, default=40, help="users (default 40)")
    parser.add_argument("--minutes", type=float, default=10, help="simulated minutes (10)")
    parser.add_argument("--step", type=int, default=5, help="seconds per clock step (5)")
    parser.add_argument("--gap", type=int, default=30, help="idle seconds closing a session (30)")
    parser.add_argument("--ttl", type=int, default=120, help="per-user count TTL, seconds (120)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the events (default 0)")
    parser.add_argument("--parallelism", type=int, default=2, help="tasks per bolt (default 2)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument(
        "--engine", choices=["spark", "inline"], default="spark",
        help="spark (default), or inline: every task in this process, no Spark",
    )  # fmt: skip
    parser.add_argument("--conf", help="JSON or YAML file of topology config keys")
    parser.add_argument("--name", default="sessions", help="topology name (default sessions)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the end")
    parser.add_argument("--json", action="store_true", help="print one JSON document at the end")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.of(args.step, args.gap, args.ttl, args.minutes)
        events = make_events(args.users, settings, args.seed)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return _run(args, settings, events, spark)
    except StatefulBoltsError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, settings: Settings, events: list[Event], spark: Any) -> int:
    from statefulbolts import LocalCluster

    conf = Config.from_file(args.conf) if args.conf else Config()
    conf.setdefault(Config.TOPOLOGY_STATE_SIZE_INTERVAL, 0)  # count keys after every commit
    # Before Spark starts: an unreachable store fails here, at once, with the provider's error.
    held = get_provider(conf).namespaces(conf, topology_prefix(args.name))
    if held:
        msg = (
            f"topology name {args.name!r} already holds state in {provider_name(conf)} "
            f"({len(held)} namespaces): the verdict is for a run from empty state; pass a new "
            "--name (or delete that state with the state tool)"
        )
        raise ConfigError(msg)
    clock = ManualClock(events[0].ts)  # the first events are due at once: the first PREPARE
    end_ms = end_time(events, settings)
    advance = AdvanceClock(clock, settings, end_ms)
    ClockedEventSpout.SOURCES[args.name] = Source(events, clock)
    if not args.json:
        print(f"topology: {args.name}", flush=True)
        print(
            f"{len(events)} events of {len({e.user for e in events})} users over "
            f"{settings.span_ms // 60_000} simulated minutes; a session closes after "
            f"{args.gap} s idle; per-user counts live {args.ttl} s; the clock moves "
            f"{args.step} s per transaction",
            flush=True,
        )
    started = time.perf_counter()
    if spark is not None:
        cluster = LocalCluster(spark=spark)
    else:
        cluster = LocalCluster(args.master, engine=args.engine)
    try:
        with cluster:
            handle = cluster.submit_topology(
                args.name, conf, build(args.name, settings, args.parallelism), clock=clock,
                on_transaction=advance,
            )  # fmt: skip
            handle.await_idle(args.timeout)
            closed, per_user = handle.read_state("closed"), handle.read_state("per_user")
            metrics = handle.metrics()
            handle.kill()
    finally:
        ClockedEventSpout.SOURCES.pop(args.name, None)
    found = verdict(
        events, settings, end_ms, closed, per_user, metrics["state_keys"].get("per_user")
    )
    if advance.prepares[-1:] != [end_ms]:
        found["exact"] = False  # the run did not reach its end time: the verdict is not final
    found.update(
        topology=args.name,
        provider=provider_name(conf),
        end_ms=end_ms,
        prepares=len(advance.prepares),
        transactions=len(metrics["transactions"]),
        seconds=round(time.perf_counter() - started, 2),
        per_user=dict(sorted((str(u), c) for u, c in per_user.items())),
    )
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        _print_summary(found, closed)
    return 0 if found["exact"] else 1


def _print_summary(found: dict[str, Any], closed: Mapping[Any, Any]) -> None:
    per_user: dict[str, list[int]] = {}
    for key, value in closed.items():
        user = str(key).split("/", 1)[0]
        per_user.setdefault(user, []).append(value["events"])
    print(f"\n{'user':<8} {'sessions':>8}  {'events':>6}  {'counted (TTL)':>13}")
    for user, sizes in sorted(per_user.items()):
        alive = found["per_user"].get(user)
        shown = "expired" if alive is None else str(alive)
        print(f"{user:<8} {len(sizes):>8}  {sum(sizes):>6}  {shown:>13}")
    print(
        f"\n{found['sessions_equal_once']} of {found['sessions_expected']} sessions closed "
        f"exactly once and equal to a plain Python sessionization; emitted twice: "
        f"{found['sessions_emitted_twice']}; wrong or missing: {found['sessions_wrong'] or 'none'}"
    )
    print(
        f"per-user counts (TTL): {found['users_alive']} users alive, {found['users_expired']} "
        f"expired; expected alive {found['users_alive_expected']}; counts "
        f"{'exact' if found['counts_exact'] else 'WRONG: ' + str(found['counts_wrong'])}; "
        f"committed keys counted: {found['state_keys_counted']}"
    )
    print(
        f"verdict: {'exact' if found['exact'] else 'NOT EXACT'} ({found['events']} events, "
        f"{found['prepares']} prepares, {found['transactions']} transactions, "
        f"{found['seconds']} s, {found['provider']} state)"
    )


if __name__ == "__main__":
    # Run from the package's module, not __main__: the spout finds its source in the class the
    # topology's copies refer to.
    import importlib

    sys.exit(importlib.import_module(__spec__.name).main())
