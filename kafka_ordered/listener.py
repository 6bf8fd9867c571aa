"""``PartitionKeyRebalanceListener``: per-key state hand-off around layout changes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, List

__all__ = ["PartitionKeyRebalanceListener"]


class PartitionKeyRebalanceListener(ABC):
    """Callbacks for applications that keep state per key (KIP-253).

    When a layout change moves keys from a partition ``q`` to a partition
    ``p``, records of those keys continue in ``p`` only after the group
    processed ``q`` up to the point where the producers switched. Both
    callbacks run on the thread that calls ``poll``/``consume``, with a list
    of the client's ``TopicPartition`` objects:

    - :meth:`on_partition_key_maybe_revoked` is called on the consumer that
      owns ``q`` once it has delivered ``q`` past the switch point (and the
      application processed those records, i.e. at the next poll). Flush or
      publish the state of keys that may have moved away. With auto-commit,
      the consumer commits ``q`` right after the callback returns.
    - :meth:`on_partition_key_assigned` is called on the consumer that owns
      ``p`` when ``p``'s gate has opened, just before the first record behind
      it is delivered. Load the state of keys that may have moved in.

    For one gate, ``on_partition_key_maybe_revoked([q])`` always happens before
    ``on_partition_key_assigned([p])``, also when one consumer owns both.
    Exceptions raised by a callback propagate out of ``poll``/``consume``.
    """

    @abstractmethod
    def on_partition_key_maybe_revoked(self, partitions: List[Any]) -> None:
        """Keys of these partitions may move to other partitions: flush their state."""

    @abstractmethod
    def on_partition_key_assigned(self, partitions: List[Any]) -> None:
        """Keys that moved into these partitions are about to be delivered: load their state."""
