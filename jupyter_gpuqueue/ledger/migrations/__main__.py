"""``python -m jupyter_gpuqueue.ledger.migrations revision -m MESSAGE [--autogenerate]``: a new
revision file in ``versions/`` (``ledger/schema.py``, ``_main``); read and fix it by hand."""

from jupyter_gpuqueue.ledger.schema import _main

raise SystemExit(_main())
