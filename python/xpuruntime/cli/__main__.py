"""``python -m xpuruntime.cli`` is the ``xpuruntime`` command."""

import sys

from .main import main

sys.exit(main())
