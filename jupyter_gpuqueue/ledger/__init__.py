"""The ledger: durable workloads and usage intervals (SQLAlchemy; SQLite in WAL mode by default,
PostgreSQL by URL), and GPU prices.

- :class:`Ledger` (``store.py``): workloads table, usage intervals, cost queries, atomic transactions.
- :class:`Prices` (``pricing.py``): USD per GPU-hour per ResourceFlavor; MIG slices by share of 7.
"""

from typing import TYPE_CHECKING

from .pricing import DEFAULT_PRICES, Prices

if TYPE_CHECKING:  # for type checkers; at run time ``__getattr__`` below imports it on first use
    from .store import Ledger

__all__ = ["Ledger", "Prices", "DEFAULT_PRICES"]


def __getattr__(name: str):
    # ``Ledger`` on first use: a single-user server that forwards to the hub's queue reads prices
    # but opens no ledger, and importing SQLAlchemy with Alembic was ~0.25 CPU s of its start.
    if name == "Ledger":
        from .store import Ledger

        return Ledger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
