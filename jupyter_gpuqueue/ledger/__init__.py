"""The ledger: durable workloads and usage intervals (SQLAlchemy; SQLite in WAL mode by default,
PostgreSQL by URL), and GPU prices.

- :class:`Ledger` (``store.py``): workloads table, usage intervals, cost queries, atomic transactions.
- :class:`Prices` (``pricing.py``): USD per GPU-hour per ResourceFlavor; MIG slices by share of 7.
"""

from .pricing import DEFAULT_PRICES, Prices
from .store import Ledger

__all__ = ["Ledger", "Prices", "DEFAULT_PRICES"]
