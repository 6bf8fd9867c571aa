"""``python -m kafka_ordered.cli``: the ``kafka-ordered`` command."""

import sys

from . import main

sys.exit(main())
