"""The SVG drawing of a batch's dependency graph on its dashboard page:
geometry computed here from `workflow.Graph`, markup in ``_graph.html``
(autoescaped), states kept live by the page's poll (each node's state is
the value ``node_ID`` of the batch's JSON, filled into ``data-state``).

Layers run top to bottom; a layer draws its first `PER_LAYER` members and
one box counting the rest, which stands in for them in the edges.
"""

from __future__ import annotations

from typing import Any

from procqueue.producer import workflow

READ_MAX = 1000
"""Members read for the drawing (a larger batch is drawn in part)."""
PER_LAYER = 16
NODE_W, NODE_H = 150, 44
GAP_X, GAP_Y, PAD = 18, 56, 12
LABEL_CHARS = 20


def _label(name: str) -> str:
    short = name.rsplit(".", 1)[-1]
    return short if len(short) <= LABEL_CHARS else short[: LABEL_CHARS - 1] + "…"


def drawing(graph: workflow.Graph) -> dict[str, Any]:
    """Boxes, edges and size of `graph`'s SVG, and ``node_ID`` → state for the poll."""
    width = PAD * 2 + NODE_W
    boxes: list[dict[str, Any]] = []
    at: dict[int, tuple[float, float]] = {}
    """Where each member's edges attach: its box, or its layer's "more" box."""
    for depth, layer in enumerate(graph.layers):
        shown, rest = layer[:PER_LAYER], layer[PER_LAYER:]
        count = len(shown) + (1 if rest else 0)
        width = max(width, PAD * 2 + count * NODE_W + (count - 1) * GAP_X)
        y = PAD + depth * (NODE_H + GAP_Y)
        for i, node in enumerate(shown):
            x = PAD + i * (NODE_W + GAP_X)
            at[node.id] = (x + NODE_W / 2, y)
            boxes.append(
                {
                    "x": x,
                    "y": y,
                    "id": node.id,
                    "key": f"node_{node.id}",
                    "state": node.state,
                    "label": f"#{node.id} {_label(node.name)}",
                    "title": f"#{node.id} {node.name}",
                    "url": f"/jobs/{node.id}",
                }
            )
        if rest:
            x = PAD + len(shown) * (NODE_W + GAP_X)
            for node in rest:
                at[node.id] = (x + NODE_W / 2, y)
            boxes.append(
                {
                    "x": x,
                    "y": y,
                    "id": None,
                    "key": "",
                    "state": "more",
                    "label": f"+{len(rest)} more",
                    "title": f"{len(rest)} more members in this layer",
                    "url": "",
                }
            )
    lines = set()
    for parent, child in graph.edges:
        (x1, y1), (x2, y2) = at[parent], at[child]
        lines.add((x1, y1 + NODE_H, x2, y2))
    height = PAD * 2 + len(graph.layers) * NODE_H + max(0, len(graph.layers) - 1) * GAP_Y
    return {
        "width": width,
        "height": height,
        "boxes": boxes,
        "edges": [{"x1": a, "y1": b, "x2": c, "y2": d} for a, b, c, d in sorted(lines)],
        "w": NODE_W,
        "h": NODE_H,
        "partial": graph.partial,
    }


def states(graph: workflow.Graph) -> dict[str, str]:
    """``node_ID`` → state of every member drawn, for the page's poll."""
    return {f"node_{n.id}": n.state for layer in graph.layers for n in layer[:PER_LAYER]}
