"""The chaos run: several real supervisors on one database, thousands of
jobs of every kind, and a controller that kills supervisors and children,
drains supervisors, freezes them (SIGSTOP), stalls the database and breaks
database connections, then checks what must still hold. `scripts/chaos.py`
is its command line; `tests/chaos/test_chaos.py` runs a bounded version in CI.

Only real processes and real signals. Time is measured, never assumed:
the controller sleeps only for its own cadence, and every wait is for a
condition with a deadline.

The supervisors run the jobs of `tests/chaos/jobs.py` (spec ``tests.chaos.jobs``)
and start through `tests/chaos/cluster.py`, which the process tests share.
"""
