"""Django's tasks framework on procqueue (``pip install procqueue[django]``).

Importing this package imports Django; nothing else in procqueue does.
See docs/django.md.
"""

from __future__ import annotations

from procqueue.contrib.django.backend import ProcqueueBackend

__all__ = ["ProcqueueBackend"]
