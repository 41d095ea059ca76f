"""The names the rest of procqueue uses the store by.

`Store` is the one SQL store, `_sql.SqlStore`: the backends are dialects of
it (`_dialect.Dialect`), not implementations of an interface, so the class
is the interface and each method's docstring its contract. A second
implementation would re-implement the SQL; tests run the real stores.
"""

from __future__ import annotations

from procqueue.store._claim import Cycle, Renewal
from procqueue.store._queries import SCHEMA_VERSION
from procqueue.store._sql import SqlStore as Store

__all__ = ["SCHEMA_VERSION", "Cycle", "Renewal", "Store"]
