"""`python -m app.cli`: the `fireside` command."""

import sys

from app.cli import main

sys.exit(main())
