"""Type checks of the admin API's arguments (pure).

A ``str`` is itself a sequence, so ``retire("orders", "billing")`` would
otherwise read the groups ``b``, ``i``, ``l``, ...: every argument that names
one or several groups, topics or partitions is checked here and anything
else raises ``TypeError`` naming the argument.
"""

from __future__ import annotations

from typing import AbstractSet, Any, List, Optional, Sequence, Tuple, Union

__all__ = ["GroupIds", "topic_name", "group_id", "optional_group_id", "group_ids", "partition_ids", "topic_partitions"]

#: One consumer group id, or a sequence (or set) of them.
GroupIds = Union[str, Sequence[str], AbstractSet[str]]


def _kind(value: Any) -> str:
    return type(value).__name__


def _nonempty_str(value: Any, name: str, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be {what} (str), got {_kind(value)} {value!r}")
    if not value:
        raise ValueError(f"{name} must not be empty")
    return value


def topic_name(value: Any, name: str = "topic") -> str:
    """``value`` if it is a non-empty ``str``; else ``TypeError`` (``ValueError`` when empty)."""
    return _nonempty_str(value, name, "a topic name")


def group_id(value: Any, name: str = "group") -> str:
    """``value`` if it is a non-empty ``str``; else ``TypeError`` (``ValueError`` when empty)."""
    return _nonempty_str(value, name, "a consumer group id")


def optional_group_id(value: Any, name: str = "group") -> Optional[str]:
    """``None`` or a group id (see :func:`group_id`)."""
    return None if value is None else group_id(value, name)


def group_ids(value: Any, name: str = "groups") -> List[str]:
    """One group id (a ``str``) or a sequence or set of them, as a list in
    the given order without repeats. Raises ``TypeError`` naming ``name`` for
    anything else (``bytes``, mappings, numbers, ``None``, non-``str``
    members) and ``ValueError`` for an empty id."""
    if isinstance(value, str):
        return [group_id(value, name)]
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, (Sequence, AbstractSet)):
        raise TypeError(f"{name} must be a consumer group id (str) or a sequence of them, got {_kind(value)} {value!r}")
    out: List[str] = []
    for g in value:
        if not isinstance(g, str):
            raise TypeError(f"{name} must hold consumer group ids (str), got {_kind(g)} {g!r}")
        if g not in out:
            out.append(group_id(g, name))
    return out


def partition_ids(value: Any, name: str = "partitions") -> List[int]:
    """A sequence or set of partition ids (``int``, not ``bool``) as a list.
    Raises ``TypeError`` naming ``name`` for anything else (a ``str`` such as
    ``"0,1"`` included); the range of each id is the caller's to check."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, (Sequence, AbstractSet)):
        raise TypeError(f"{name} must be a sequence of partition ids (int), got {_kind(value)} {value!r}")
    out = list(value)
    for p in out:
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(f"{name} must hold partition ids (int), got {_kind(p)} {p!r}")
    return out


def topic_partitions(value: Any, name: str = "partitions") -> List[Tuple[str, int]]:
    """A sequence of ``(topic, partition)`` pairs as a list; ``TypeError``
    naming ``name`` for anything else."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, (Sequence, AbstractSet)):
        raise TypeError(f"{name} must be a sequence of (topic, partition) pairs, got {_kind(value)} {value!r}")
    out: List[Tuple[str, int]] = []
    for tp in value:
        if (not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str)
                or isinstance(tp[1], bool) or not isinstance(tp[1], int)):
            raise TypeError(f"{name} must hold (topic, partition) pairs (str, int), got {_kind(tp)} {tp!r}")
        out.append((tp[0], tp[1]))
    return out
