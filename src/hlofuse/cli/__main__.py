"""`python -m hlofuse.cli`: the same as the `hlofuse` console script."""

import sys

from hlofuse.cli import main

sys.exit(main())
