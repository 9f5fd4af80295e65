"""``python -m jupyter_gpuqueue.cli``: the same as the console script ``jupyter-gpuqueue``."""

import sys

from .program import main

sys.exit(main())
