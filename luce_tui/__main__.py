"""`python -m luce_tui` runs luce-chat."""

import sys

from luce_tui.cli import main

sys.exit(main())
