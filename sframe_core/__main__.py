"""``python -m sframe_core``: the ``sframe`` command without installing it."""

import sys

from .cli.commands import main

sys.exit(main())
