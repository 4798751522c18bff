"""`python -m inspector CKPT...`: the same as the `pytree-inspector` command."""

import sys

from inspector.cli import main

sys.exit(main())
