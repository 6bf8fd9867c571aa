"""True log-end and log-start offsets of data partitions (public).

:class:`OffsetReader` takes end offsets from Fetch high watermarks, which are
right on every broker (the embedded broker's ListOffsets is not after
multi-record batches). The Spark source and tools use it; the wrappers share
one per process.
"""

from __future__ import annotations

from ._kafka import OffsetReader

__all__ = ["OffsetReader"]
