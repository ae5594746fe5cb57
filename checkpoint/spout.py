"""``CheckpointSpout``: drives checkpoint transactions through the topology.

It emits ``$checkpoint`` tuples ``(txid, action)`` with the txid as message id, and moves its
saved ``CheckPointState`` on each ack. On start, and after any failure, it recovers first:
PREPARING(t) rolls back to COMMITTED(t-1), COMMITTING(t) rolls forward to COMMITTED(t), and
COMMITTED(t) sends INITSTATE(t); then normal PREPARE / COMMIT cycles follow.

When a PREPARE is due from COMMITTED(t) is the cadence (``topology.state.checkpoint.cadence``):

- ``interval`` (Storm's): once the checkpoint interval has passed since the last PREPARE;
- ``back-to-back`` (the default): also as soon as tuples wait (the runtime's ``waiting``), so a
  loaded topology runs its transactions one after the other, each carrying what arrived during
  the one before, and a tuple waits for the transaction under way, not for an interval tick.

Either way one transaction at a time, PREPARE then COMMIT: COMMITTED(t) is saved only when
COMMIT(t) was acked, and recovery goes first, as above. Here data moves only with a
transaction (in Storm it flows between checkpoints), so under ``interval`` a tuple waited
for the next tick on top of its transaction.

Differences from Storm, deliberate: ``next_tuple`` never sleeps (the runtime decides how to idle);
an ack or fail for a txid other than the current one is logged and ignored (Storm re-emits the
current action on a mismatched ack and starts recovery on any stale fail).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from checkpoint._state import Action, CheckPointState, TxPhase
from providers import KeyValueState, StateFactory
from statefulbolts.clock import Clock
from statefulbolts.collectors import SpoutOutputCollector
from statefulbolts.components import OutputFieldsDeclarer, Spout
from statefulbolts.config import Config, read_setting
from statefulbolts.context import TopologyContext
from statefulbolts.topology import CHECKPOINT_FIELDS, CHECKPOINT_STREAM_ID

log = logging.getLogger(__name__)

TX_STATE_KEY = "__state"
MIN_INTERVAL_MS = 100
INTERVAL_KEY = Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL
CADENCE_KEY = Config.TOPOLOGY_STATE_CHECKPOINT_CADENCE


def _nothing_waits() -> bool:
    return False


class CheckpointSpout(Spout):
    """The ``$checkpointspout`` component. The runtime creates it; users never do.

    ``waiting``: whether tuples wait for a transaction (the runtime's buffer); under the
    ``back-to-back`` cadence a PREPARE is due whenever it says so.
    """

    def __init__(
        self, clock: Clock | None = None, waiting: Callable[[], bool] | None = None
    ) -> None:
        self.clock = clock or Clock()
        self._waiting = waiting or _nothing_waits
        self.back_to_back = False
        self.state: KeyValueState | None = None
        self.collector: SpoutOutputCollector | None = None
        self.cur: CheckPointState = CheckPointState(-1, TxPhase.COMMITTED)
        self.recovering = True
        self._recovery_in_progress = False
        self._checkpoint_in_progress = False
        self._last_checkpoint_ms: float | None = None
        self.interval_ms: float = 1000

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """``$checkpoint`` with fields ``(txid, action)``."""
        declarer.declare_stream(CHECKPOINT_STREAM_ID, CHECKPOINT_FIELDS)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        """Read the interval and the saved state from the provider.

        The interval is the config model's (1000 ms when the key is missing, as the driver
        reads it too), at least 100 ms. Storm's spout reads a missing key as 0 and so
        checkpoints every 100 ms unless its cluster defaults fill the key in; here the
        documented default holds wherever the topology runs.
        """
        interval = max(MIN_INTERVAL_MS, read_setting(conf, INTERVAL_KEY))
        back_to_back = read_setting(conf, CADENCE_KEY) == "back-to-back"
        # The framework's own record: plain msgpack, whatever serializers the user configured.
        state = StateFactory.get_system_state(context.state_namespace(), conf, context)
        if not isinstance(state, KeyValueState):
            msg = f"the state provider returned {type(state).__qualname__}, not a KeyValueState"
            raise TypeError(msg)
        self.open_with(collector, interval, state, back_to_back=back_to_back)

    def open_with(
        self,
        collector: SpoutOutputCollector,
        interval_ms: float,
        state: KeyValueState,
        *,
        back_to_back: bool = False,
    ) -> None:
        """Open with an explicit interval (not clamped), cadence and state; tests use this."""
        self.collector = collector
        self.interval_ms = interval_ms
        self.back_to_back = back_to_back
        self.state = state
        saved = state.get(TX_STATE_KEY)
        if saved is None:
            self._save(CheckPointState(-1, TxPhase.COMMITTED))
        else:
            self.cur = CheckPointState.from_value(saved)
        log.info("checkpoint spout opened at %s", self.cur)

    def _save(self, new: CheckPointState) -> None:
        assert self.state is not None  # noqa: S101 - open() ran
        self.state.put(TX_STATE_KEY, new.to_value())
        self.state.commit()
        self.cur = new

    @property
    def in_progress(self) -> bool:
        """Whether an emitted action is still waiting for its ack or fail."""
        return self._recovery_in_progress if self.recovering else self._checkpoint_in_progress

    @property
    def has_checkpointed(self) -> bool:
        """Whether a PREPARE has gone out since ``open`` (the first goes out as soon as it may)."""
        return self._last_checkpoint_ms is not None

    def due(self) -> bool:
        """Whether ``next_tuple`` would emit now."""
        if self.recovering:
            return not self._recovery_in_progress
        if self._checkpoint_in_progress:
            return False
        return self.cur.phase is not TxPhase.COMMITTED or self._prepare_due()

    def _prepare_due(self) -> bool:
        """From COMMITTED: the cadence's rule (module docstring)."""
        if self.back_to_back and self._waiting():
            return True
        last = self._last_checkpoint_ms
        return last is None or self.clock.now_ms() - last > self.interval_ms

    def next_tuple(self) -> None:
        """Emit the next action if one is due; otherwise do nothing."""
        if self.recovering:
            if not self._recovery_in_progress:
                self._emit(self.cur.txid, self.cur.next_action(True))
                self._recovery_in_progress = True
            return
        if self._checkpoint_in_progress:
            return
        if self.cur.phase is TxPhase.COMMITTED:
            if not self._prepare_due():
                return
            self._save(self.cur.next_state(False))
            self._last_checkpoint_ms = self.clock.now_ms()
        self._emit(self.cur.txid, self.cur.next_action(False))
        self._checkpoint_in_progress = True

    def _emit(self, txid: int, action: Action) -> None:
        assert self.collector is not None  # noqa: S101 - open() ran
        log.debug("checkpoint spout emits %s(%s)", action.value, txid)
        self.collector.emit([txid, action.value], message_id=txid, stream=CHECKPOINT_STREAM_ID)

    def ack(self, msg_id: Any) -> None:
        """Move to the next state when the current action's tree completed."""
        if msg_id != self.cur.txid:
            log.warning("ignoring ack of txid %s; current is %s", msg_id, self.cur)
            return
        if self.recovering:
            nxt = self.cur.next_state(True)
            if nxt != self.cur:
                self._save(nxt)
            else:
                self.recovering = False
        else:
            self._save(self.cur.next_state(False))
        self._reset_progress()

    def fail(self, msg_id: Any) -> None:
        """Start (or repeat) recovery after the current action failed."""
        if msg_id != self.cur.txid:
            log.warning("ignoring fail of txid %s; current is %s", msg_id, self.cur)
            return
        self.recovering = True
        self._reset_progress()

    def _reset_progress(self) -> None:
        if self.recovering:
            self._recovery_in_progress = False
        else:
            self._checkpoint_in_progress = False
