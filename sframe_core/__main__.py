"""``python -m sframe_core``: the ``sframe`` command without installing it."""

import sys

from .cli import main

sys.exit(main())
