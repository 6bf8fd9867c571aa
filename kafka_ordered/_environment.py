"""Environment variables kafka-ordered reads (pure, no imports).

Kept apart from :mod:`kafka_ordered.testing` so that the CLI can name them
without importing the testing machinery.
"""

from __future__ import annotations

__all__ = ["BOOTSTRAP_ENV"]

#: Environment variable naming an external broker (``host:port``): the CLI's
#: default ``--bootstrap``, and the broker tests and the demo use instead of
#: starting an embedded one.
BOOTSTRAP_ENV = "KAFKA_ORDERED_BOOTSTRAP"
