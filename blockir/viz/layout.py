"""One layered layout for every op a pipeline ever had, so an op keeps its place from pass to pass.

The graph laid out is the union over all kept programs: every op id (removed
ops stay, drawn as ghosts) and every value edge (writer -> reader) of any
state. Each block is laid out on its own, top to bottom:

1. rank: the longest path from the block's sources along the edges (a
   topological order, first-seen order breaking ties and cycles); an op with
   no inputs from other ops moves down to just above its first reader, an op
   with no edges at all takes the rank of the op before it;
2. order and x: rank by rank, each op wants to sit centred under the mean x
   of the ops it reads from; ops are packed left to right in that order, each
   at its wanted x or the first free x right of its neighbour;
3. y: ranks stacked, each as tall as its tallest op;
4. columns: a block taller than WRAP_HEIGHT and than wide (a chain of
   layers and its backward pass) is cut between ranks into columns placed side by side,
   about as many as bring it near ASPECT (width / height, the page's graph
   pane), so that it uses the page's width; each column starts at the top
   and keeps its ranks' order, and the edges from one column to the next
   climb back up.

No dummy nodes are inserted for long edges (a layered layout with them, as
Sugiyama's, dagre's or ELK's, grows with the edges' lengths: a backward pass
reads activations thousands of ranks up), and there is no crossing
minimisation beyond the barycentre order; the measurements behind this choice
are in ``docs/viz.md``. A sub-block is laid out the same way and placed right
of its parent block, level with the op that runs it. Sizes are in CSS pixels
and follow the labels (a monospace font of 11 px).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

__all__ = ["layout"]

CHAR_W = 6.6  # px per character of the labels' 11px monospace font
LINE_H = 14
PAD = 8
MIN_W, MAX_W = 64, 300
GAP_X, GAP_Y = 16, 28
BLOCK_PAD, BLOCK_TITLE, BLOCK_GAP = 16, 22, 60
ASPECT, COLUMN_GAP = 1.6, 48  # the width / height a tall block is wrapped towards (the page's graph pane)
WRAP_HEIGHT = 480  # a block this tall or less fits the graph pane of a 1366x768 window: it stays one column


def _size(labels: Sequence[Sequence[str]]) -> tuple[float, float]:
    chars = max(len(line) for label in labels for line in label)
    lines = max(len(label) for label in labels)
    return min(MAX_W, max(MIN_W, round(chars * CHAR_W + 2 * PAD))), lines * LINE_H + PAD


def _ranks(ids: list[int], preds: dict[int, list[int]], succs: dict[int, list[int]]) -> dict[int, int]:
    position = {i: k for k, i in enumerate(ids)}
    waiting = {i: len(preds[i]) for i in ids}
    ready = [(position[i], i) for i in ids if waiting[i] == 0]
    heapq.heapify(ready)
    rank: dict[int, int] = {}
    while len(rank) < len(ids):
        if not ready:  # a cycle (passes disagreeing on an order): cut it at the first-seen op left
            i = min((i for i in ids if i not in rank), key=position.__getitem__)
            waiting[i] = 0
            heapq.heappush(ready, (position[i], i))
        _, i = heapq.heappop(ready)
        if i in rank:
            continue
        rank[i] = max((rank[p] + 1 for p in preds[i] if p in rank), default=0)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (position[s], s))
    previous = 0
    for i in ids:
        if not preds[i] and succs[i]:
            rank[i] = max(0, min(rank[s] for s in succs[i]) - 1)
        elif not preds[i]:
            rank[i] = previous
        previous = rank[i]
    return rank


def _place_block(
    ids: list[int], sizes: dict[int, tuple[float, float]], preds: dict[int, list[int]], succs: dict[int, list[int]]
) -> dict[int, list[float]]:
    rank = _ranks(ids, preds, succs)
    rows: dict[int, list[int]] = {}
    for i in ids:
        rows.setdefault(rank[i], []).append(i)
    centre: dict[int, float] = {}
    placed: dict[int, list[float]] = {}
    tops: list[tuple[float, list[int]]] = []  # per rank: its y and its ops
    y = 0.0
    for r in sorted(rows):
        row = rows[r]
        tops.append((y, row))
        wanted: dict[int, float] = {}
        previous = 0.0
        for i in row:  # an op reading no placed op wants the place of the op before it
            xs = [centre[p] for p in preds[i] if p in centre]
            wanted[i] = previous = sum(xs) / len(xs) if xs else previous
        right = float("-inf")
        for i in sorted(row, key=lambda i: wanted[i]):
            w, h = sizes[i]
            x = max(wanted[i] - w / 2, right + GAP_X)
            placed[i] = [x, y, w, h]
            centre[i] = x + w / 2
            right = x + w
        y += max(sizes[i][1] for i in row) + GAP_Y
    left = min((p[0] for p in placed.values()), default=0.0)
    for p in placed.values():
        p[0] -= left
    _wrap(placed, tops, y - GAP_Y)
    return placed


def _wrap(placed: dict[int, list[float]], tops: list[tuple[float, list[int]]], height: float) -> None:
    """Cut a tall block's ranks into columns side by side (step 4 of the module docstring), in place."""
    width = max((p[0] + p[2] for p in placed.values()), default=0.0)
    count = round(math.sqrt(ASPECT * height / max(width, MIN_W)))
    if count < 2 or height <= WRAP_HEIGHT:
        return
    columns: list[list[tuple[float, list[int]]]] = [[]]
    for y, row in tops:  # a new column where the column so far has its share of the height
        if columns[-1] and y - columns[-1][0][0] >= height / count:
            columns.append([])
        columns[-1].append((y, row))
    x0 = 0.0
    for column in columns:
        ids = [i for _, row in column for i in row]
        y0, left = column[0][0], min(placed[i][0] for i in ids)
        for i in ids:
            placed[i][0] += x0 - left
            placed[i][1] -= y0
        x0 = max(placed[i][0] + placed[i][2] for i in ids) + COLUMN_GAP


def layout(
    ops: Sequence[dict[str, Any]],
    edges: Sequence[Sequence[Any]],
    first_seen: dict[int, tuple[int, int, int]],
    blocks: Sequence[dict[str, Any]],
) -> tuple[dict[int, list[float]], list[list[float] | None]]:
    """Positions ``{op id: [x, y, w, h, block]}`` and each block's box ``[x, y, w, h]`` (None if empty).

    ``ops`` are the versions of the model (``id``, ``label``); ``edges``
    ``[writer id, reader id, ...]``; ``first_seen`` op id -> (block, state,
    position) where it first appears, the order ties are broken in;
    ``blocks[b]`` has the ``parent`` of block ``b`` and its ``owner`` (the op
    running it, or None).
    """
    labels: dict[int, list[list[str]]] = {}
    for op in ops:
        labels.setdefault(op["id"], []).append(op["label"])
    sizes = {i: _size(ls) for i, ls in labels.items()}
    by_block: dict[int, list[int]] = {}
    for i in sorted(labels, key=lambda i: first_seen[i][1:]):
        by_block.setdefault(first_seen[i][0], []).append(i)
    preds: dict[int, list[int]] = {i: [] for i in labels}
    succs: dict[int, list[int]] = {i: [] for i in labels}
    for src, dst, *_ in edges:
        if first_seen[src][0] == first_seen[dst][0] and src not in preds[dst]:
            preds[dst].append(src)
            succs[src].append(dst)
    nodes: dict[int, list[float]] = {}
    boxes: list[list[float] | None] = [None] * len(blocks)
    for b, block in enumerate(blocks):
        placed = _place_block(by_block.get(b, []), sizes, preds, succs)
        if not placed:
            continue
        w = max(p[0] + p[2] for p in placed.values())
        h = max(p[1] + p[3] for p in placed.values())
        parent, owner = block["parent"], block["owner"]
        pbox = boxes[parent] if b != 0 and parent >= 0 else None
        if pbox is None:
            x0, y0 = 0.0, 0.0
        else:
            x0 = pbox[0] + pbox[2] + BLOCK_GAP
            y0 = nodes[owner][1] if owner in nodes else pbox[1]
            for other in boxes[:b]:  # below any sub-block already placed where this one would go
                if other is not None and other[0] >= x0 and other[1] < y0 + h and y0 < other[1] + other[3]:
                    y0 = max(y0, other[1] + other[3] + BLOCK_GAP)
        box_x, box_y = x0, y0
        inner_x, inner_y = (x0 + BLOCK_PAD, y0 + BLOCK_TITLE) if b else (x0, y0)
        for i, p in placed.items():
            nodes[i] = [round(p[0] + inner_x, 1), round(p[1] + inner_y, 1), p[2], p[3], b]
        extra = (2 * BLOCK_PAD, BLOCK_TITLE + BLOCK_PAD) if b else (0, 0)
        boxes[b] = [box_x, box_y, round(w + extra[0], 1), round(h + extra[1], 1)]
    return nodes, boxes
