"""A batch's dependency graph: its members as nodes, the dependencies
between them as edges, in layers (a member's layer is one past its deepest
dependency in the batch), for ``procqueue batch show --graph`` and the
dashboard's batch page. Pure once read: `read` makes the store calls."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from procqueue import models
from procqueue.producer.control import Control

NODES_MAX = 5000
"""Members read into one graph; a larger batch is drawn in part (`Graph.partial`)."""


class Node(msgspec.Struct, frozen=True):
    id: int
    name: str
    state: str
    layer: int
    after: list[int]
    """Its dependencies' ids, in the batch or not."""


class Graph(msgspec.Struct, frozen=True):
    batch_id: int
    layers: list[list[Node]]
    """Nodes by layer, each layer in id order."""
    edges: list[tuple[int, int]]
    """(dependency, dependent) between members of the batch."""
    partial: bool = False
    """The batch has more members than were read: only the first are drawn."""

    @property
    def is_workflow(self) -> bool:
        """Whether any member depends on another."""
        return bool(self.edges)


def layout(
    batch_id: int,
    members: Iterable[models.JobInfo],
    deps: Iterable[models.Dependency],
    *,
    partial: bool = False,
) -> Graph:
    """The graph of `members` (any order) with `deps`. A dependency always
    has a lower id than its dependent, so one pass in id order places
    every dependency before the jobs that wait for it."""
    after: dict[int, list[int]] = {}
    for d in deps:
        after.setdefault(d.job_id, []).append(d.depends_on)
    layer: dict[int, int] = {}
    nodes: list[Node] = []
    edges: list[tuple[int, int]] = []
    for job in sorted(members, key=lambda j: j.id):
        parents = sorted(after.get(job.id, []))
        inside = [p for p in parents if p in layer]
        layer[job.id] = 1 + max((layer[p] for p in inside), default=-1)
        edges.extend((p, job.id) for p in inside)
        nodes.append(Node(job.id, job.name, job.state.value, layer[job.id], parents))
    layers: list[list[Node]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for node in nodes:
        layers[node.layer].append(node)
    return Graph(batch_id=batch_id, layers=layers, edges=edges, partial=partial)


def read(
    control: Control,
    batch_id: int,
    members: Iterable[models.JobInfo],
    *,
    limit: int = NODES_MAX,
) -> Graph:
    """The graph of batch `batch_id` from its `members` (up to `limit` of
    them are read), with their dependencies read in pages."""
    found: list[models.JobInfo] = []
    partial = False
    for job in members:
        if len(found) >= limit:
            partial = True
            break
        found.append(job)
    deps: list[models.Dependency] = []
    ids = [j.id for j in found]
    for start in range(0, len(ids), 500):
        deps.extend(control.dependencies(ids[start : start + 500]))
    return layout(batch_id, found, deps, partial=partial)
