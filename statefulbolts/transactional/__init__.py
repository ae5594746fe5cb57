"""Storm's transactional topologies: exactly-once batches, committed strictly in txid order.

Work in progress: the public face is filled in as the pieces land.
"""

from statefulbolts.transactional._attempt import TransactionAttempt

__all__ = ["TransactionAttempt"]
