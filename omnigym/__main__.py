"""``python -m omnigym``: the omnigym command line."""

from omnigym.platform.cli import main

raise SystemExit(main())
