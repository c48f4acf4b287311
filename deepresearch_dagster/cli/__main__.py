"""``python -m deepresearch_dagster.cli``."""

import sys

from . import main

sys.exit(main())
