"""OpenTelemetry traces of procqueue jobs (``pip install procqueue[otel]``),
following the messaging semantic conventions; built on `App.hooks`.

Importing this package imports OpenTelemetry; nothing else in procqueue
does. See docs/tracing.md.
"""

from __future__ import annotations

from procqueue.contrib.otel.tracing import instrument

__all__ = ["instrument"]
