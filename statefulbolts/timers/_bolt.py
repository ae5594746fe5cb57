"""``TimerBolt``: a stateful bolt with per-key timers, and the collector its callback gets."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from statefulbolts.collectors import Anchors, OutputCollector
from statefulbolts.components import StatefulBolt
from statefulbolts.ticks import TICK_FREQ_KEY
from statefulbolts.timers._errors import TimerNotReadyError
from statefulbolts.timers._service import Number, TimeDomain, TimerService
from statefulbolts.tuples import DEFAULT_STREAM, Tuple

__all__ = ["TimerBolt", "TimerOutputCollector", "attach_timers", "uses_timers"]

# Where the framework puts a bolt's service (``attach_timers``); ``TimerBolt.timers`` reads it.
_SERVICE = "_statefulbolts_timer_service"


class TimerBolt(StatefulBolt):
    """A ``StatefulBolt`` with per-key timers that survive failures and restarts and fire once.

    ``self.timers`` (a ``TimerService``) is there from ``init_state`` on: the timers are
    restored with the bolt's state, so they can be used exactly when the state can. Register a
    timer for a key with ``self.timers.register_processing_time_timer(key, at_ms)`` (or the
    event-time one); the framework calls ``on_timer(key, at_ms, time_domain, collector)`` once
    when it is due (rules in ``statefulbolts.timers``).

    Processing time is the time each transaction started, fixed by the driver
    (``self.timers.current_processing_time()``); the driver only starts a transaction when
    something is to do, so the bolt asks for tick tuples every ``timer_check_secs`` seconds
    (its ``get_component_configuration``; the declarer's ``add_configuration`` of
    ``topology.tick.tuple.freq.secs`` wins over it), and an idle topology still fires its
    timers that often. Those ticks reach ``execute`` as any tick does: skip them with
    ``is_tick_tuple``. Set ``timer_check_secs`` to ``None`` for no ticks of its own: timers
    then fire only when a transaction starts for data or for the topology's own ticks.

    Example:
        >>> from statefulbolts import Fields, is_tick_tuple
        >>> class SessionEnd(TimerBolt):
        ...     timer_check_secs = 5
        ...     def prepare(self, conf, context, collector):
        ...         self.collector = collector
        ...     def init_state(self, state):
        ...         self.last_seen = state
        ...     def execute(self, tuple):
        ...         if not is_tick_tuple(tuple):
        ...             user, now = tuple.get_value(0), self.timers.current_processing_time()
        ...             self.last_seen.put(user, now)
        ...             self.timers.register_processing_time_timer(user, now + 60_000)
        ...         self.collector.ack(tuple)
        ...     def on_timer(self, key, at_ms, time_domain, collector):
        ...         if self.last_seen.get(key, 0) + 60_000 <= at_ms:
        ...             self.last_seen.delete(key)
        ...             collector.emit([key])
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("user"))
        >>> SessionEnd().get_component_configuration()
        {'topology.tick.tuple.freq.secs': 5}
    """

    #: Seconds between the tick tuples this bolt asks for, so due timers fire when the
    #: topology is idle; ``None``: none of its own.
    timer_check_secs: ClassVar[int | None] = 1

    @property
    def timers(self) -> TimerService:
        """This task's timer service (from ``init_state`` on)."""
        service = self.__dict__.get(_SERVICE)
        if service is None:
            cls = type(self)
            msg = (
                f"{cls.__module__}.{cls.__qualname__}.timers used before init_state: the "
                "timers are restored with the bolt's state; use them from init_state on"
            )
            raise TimerNotReadyError(msg)
        return service

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        """Ask for tick tuples every ``timer_check_secs`` seconds (if set)."""
        every = self.timer_check_secs
        return None if every is None else {TICK_FREQ_KEY: every}

    @abstractmethod
    def on_timer(
        self, key: Any, at_ms: Number, time_domain: TimeDomain, collector: TimerOutputCollector
    ) -> None:
        """A timer of ``key`` at ``at_ms`` fired; emit through ``collector`` (untracked)."""


class TimerOutputCollector(OutputCollector):
    """What ``on_timer`` emits through: no input tuple to anchor to, so untracked by default.

    A timer's emit belongs to the transaction it fired in, as the state it writes does: a
    replayed transaction fires the same timers and emits again.
    """

    def __init__(self, delegate: OutputCollector) -> None:
        self._delegate = delegate

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit ``values`` on ``stream``; untracked unless ``anchors`` are given."""
        self._delegate.emit(values, [] if anchors is None else anchors, stream)

    def ack(self, tuple_: Tuple) -> None:
        """Ack through the bolt's collector."""
        self._delegate.ack(tuple_)

    def fail(self, tuple_: Tuple) -> None:
        """Fail through the bolt's collector."""
        self._delegate.fail(tuple_)

    def report_error(self, error: BaseException) -> None:
        """Report through the bolt's collector."""
        self._delegate.report_error(error)


def uses_timers(bolt: Any) -> bool:
    """Whether ``bolt`` (a component's object) has timers: a ``TimerBolt``."""
    return isinstance(bolt, TimerBolt)


def attach_timers(bolt: TimerBolt, service: TimerService) -> None:
    """Give ``bolt`` its service (the framework, before ``init_state``)."""
    bolt.__dict__[_SERVICE] = service
