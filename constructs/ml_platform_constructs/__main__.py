"""``python -m ml_platform_constructs ...``: see ``ml_platform_constructs.operations``."""

import sys

from .operations.cli import main

sys.exit(main(sys.argv[1:]))
