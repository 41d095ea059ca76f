"""Prometheus metrics of one supervisor (prometheus-client, own registry).

Collected and served over HTTP only when ``--metrics-port`` is given: a
supervisor nobody scrapes pays nothing per job for them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from procqueue import errors, events
from procqueue.store.base import Store

log = logging.getLogger("procqueue.supervisor")

_SECONDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 1800, 3600)


class Metrics:
    """The supervisor's counters, histograms and gauges."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        self.claimed = Counter(
            "procqueue_jobs_claimed", "Jobs claimed", ["queue", "name"], registry=r
        )
        self.finished = Counter(
            "procqueue_jobs_finished",
            "Attempts ended, by outcome: done, failed, retried, cancelled, handed_back",
            ["queue", "name", "outcome"],
            registry=r,
        )
        self.run_seconds = Histogram(
            "procqueue_job_run_seconds",
            "Run time of attempts",
            ["queue", "name"],
            buckets=_SECONDS,
            registry=r,
        )
        self.wait_seconds = Histogram(
            "procqueue_job_queue_wait_seconds",
            "From run_at to claim",
            ["queue"],
            buckets=_SECONDS,
            registry=r,
        )
        self.busy = Gauge("procqueue_children_busy", "Children running a job", registry=r)
        self.children = Gauge("procqueue_children", "Child slots", registry=r)
        self.restarts = Counter(
            "procqueue_child_restarts",
            "Children replaced, by reason: "
            "crash, timeout, cancel, memory, recycle, lease, drain, error",
            ["reason"],
            registry=r,
        )
        self.throttled = Counter(
            "procqueue_claims_throttled",
            "Claims that left due work behind for a flow limit (rate or group_limit)",
            ["limit"],
            registry=r,
        )
        self.renewals = Counter("procqueue_lease_renewals", "Lease renewal statements", registry=r)
        self.leases_lost = Counter(
            "procqueue_leases_lost", "Attempts whose lease was lost", registry=r
        )

    def observe(self, event: events.Event) -> None:
        """Counts one supervisor event (an `events.EventStream` subscriber).
        Labelled children are looked up once per label set and cached: a
        label lookup costs more than the count itself."""
        if isinstance(event, events.Claimed):
            self._child(self.claimed, event.queue, event.name).inc()
            self._child(self.wait_seconds, event.queue).observe(event.waited)
        elif isinstance(event, events.Finished):
            if event.outcome == "lost":
                self.leases_lost.inc()
                return
            self._child(self.finished, event.queue, event.name, event.outcome).inc()
            self._child(self.run_seconds, event.queue, event.name).observe(event.seconds)
        elif isinstance(event, events.Throttled):
            self._child(self.throttled, event.limit).inc()
        elif isinstance(event, events.Renewed):
            self.renewals.inc()
        elif isinstance(event, events.ChildDied):
            reason = event.kill or ("recycle" if event.expected else "crash")
            self.restarts.labels(reason).inc()

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def watch_batches(self, store: Store) -> None:
        """Adds the batch gauges, read from `store` at each scrape (so they are
        never staler than the scrape)."""
        self.registry.register(BatchCollector(store))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serves /metrics on `host:port` from a daemon thread."""
        start_http_server(port, addr=host, registry=self.registry)


class BatchCollector(Collector):
    """``procqueue_batch_members{batch, state}``: the members of batches not
    yet complete, per batch name and state. Read at scrape time, on the
    metrics server's thread, never on the supervision loop's; a scrape while
    the database is away reports nothing rather than failing."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "procqueue_batch_members",
            "Members of batches not yet complete, by batch name and state",
            labels=["batch", "state"],
        )
        try:
            counts = self.store.batch_member_counts()
        except errors.StoreError as exc:
            log.debug("batch gauges not read: %s", exc)
            counts = []
        for name, state, n in counts:
            family.add_metric([name, state], n)
        yield family
