"""``python -m sframe_core.analysis.native``: build the C analysis (setup.sh runs it)."""

import sys

from . import main

sys.exit(main())
