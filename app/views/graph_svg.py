"""The rollout's message graph as geometry for a small server-drawn SVG (templates draw it; no
HTML here) and as data for the JSON twin.

Layout: one lane per branch shown (a node sits on the lane of the first shown branch that holds
it), one column per step of depth. A rollout with thousands of nodes stays small: when the
longest path shown has more than MAX_COLUMNS nodes, every linear run (nodes with one child, no
kind, not a fork point, root or leaf) becomes one segment drawn with its count; when there are
more than MAX_LANES branches, the first ones and those around the branch being read are drawn
and the rest counted.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ingest.graph import NODE_KINDS, GraphNode

MAX_LANES = 12
MAX_COLUMNS = 40
DX, DY, PAD = 22, 18, 12


def graph_data(nodes: Sequence[GraphNode], paths: Sequence[Sequence[int]]) -> dict:
    """The JSON twin's graph: nodes with parent, role, sampled, token counts, kind and the
    branches that hold them."""
    member: list[list[int]] = [[] for _ in nodes]
    for b, path in enumerate(paths):
        for i in path:
            if i < len(member):
                member[i].append(b)
    return {"nodes": [{"idx": n.idx, "parent": n.parent, "role": n.role, "sampled": n.sampled,
                       "n_tokens": n.n_tokens, "n_trained": n.n_trained, "kind": n.kind, "branches": member[n.idx]}
                      for n in nodes],
            "kinds": NODE_KINDS}


def _shown_branches(n: int, current: int) -> list[int]:
    if n <= MAX_LANES:
        return list(range(n))
    keep = list(range(4)) + list(range(max(0, current - 3), min(n, current + 4))) + [n - 1]
    return sorted(set(keep))[:MAX_LANES] if current < MAX_LANES else sorted(set(keep))


def layout(nodes: Sequence[GraphNode], paths: Sequence[Sequence[int]], current: int,
           href: Callable[[int, int], str]) -> dict:
    """SVG geometry: `units` (a node or a collapsed run: x, y, role, sampled, kind, count,
    current, href, title), `edges` (x1, y1, x2, y2, current, kind), `width`, `height`, and
    `hidden_branches` (not drawn). `href(branch, idx)` links a node in a branch."""
    if not nodes or not paths:
        return {"units": [], "edges": [], "width": 0, "height": 0, "hidden_branches": 0, "collapsed": False}
    shown = _shown_branches(len(paths), current)
    lane_of: dict[int, int] = {}
    branch_of: dict[int, int] = {}
    for lane, b in enumerate(shown):
        for i in paths[b]:
            lane_of.setdefault(i, lane)
            branch_of.setdefault(i, b)
    on_current = set(paths[current]) if 0 <= current < len(paths) else set()
    collapse = max(len(paths[b]) for b in shown) > MAX_COLUMNS
    units = _units(nodes, paths, shown, lane_of, on_current, collapse)
    edges = _place(units, current, on_current, branch_of, href)
    width = PAD * 2 + max(u["col"] for u in units) * DX
    height = PAD * 2 + (len(shown) - 1) * DY
    for u in units:
        u.pop("parent_unit")
        if u["count"] <= 1:
            u["count"] = 0
    return {"units": units, "edges": edges, "width": width, "height": height,
            "hidden_branches": len(paths) - len(shown), "collapsed": collapse,
            "lanes": [{"branch": b, "y": PAD + lane * DY, "current": b == current} for lane, b in enumerate(shown)]}


def _units(nodes, paths, shown: list[int], lane_of: dict[int, int], on_current: set[int], collapse: bool) -> list[dict]:
    """A unit per kept node, in column order along each shown branch; with `collapse`, a run of
    nodes with one child each (and no kind) becomes one unit keyed by its first node (`count`)."""
    children: dict[int, int] = {}
    for n in nodes:
        if n.parent is not None:
            children[n.parent] = children.get(n.parent, 0) + 1

    def keep(i: int) -> bool:
        n = nodes[i]
        return (n.parent is None or children.get(i, 0) != 1 or n.kind is not None
                or children.get(n.parent, 0) != 1)

    unit_of: dict[int, int] = {}
    units: list[dict] = []
    for b in shown:
        prev_unit = None
        for i in paths[b]:
            if i in unit_of:
                prev_unit = unit_of[i]
                continue
            n = nodes[i]
            if collapse and not keep(i) and prev_unit is not None and units[prev_unit]["count"] > 0 \
                    and units[prev_unit]["last"] == n.parent and lane_of[units[prev_unit]["first"]] == lane_of[i]:
                u = units[prev_unit]
                u["count"] += 1
                u["last"] = i
                u["current"] = u["current"] and i in on_current
                unit_of[i] = prev_unit
                continue
            parent_unit = unit_of.get(n.parent) if n.parent is not None else None
            c = (units[parent_unit]["col"] + 1) if parent_unit is not None else 0
            units.append({"first": i, "last": i, "count": 1 if (collapse and not keep(i)) else 0,
                          "idx": i, "role": n.role, "sampled": n.sampled, "kind": n.kind,
                          "col": c, "lane": lane_of[i], "current": i in on_current,
                          "parent_unit": parent_unit, "n_tokens": n.n_tokens})
            unit_of[i] = len(units) - 1
            prev_unit = len(units) - 1
    return units


def _place(units: list[dict], current: int, on_current: set[int], branch_of: dict[int, int], href) -> list[dict]:
    """Give each unit (in place) its x, y, link and title; → the edges from each unit's parent."""
    edges = []
    for u in units:
        u["x"] = PAD + u["col"] * DX
        u["y"] = PAD + u["lane"] * DY
        b = current if u["first"] in on_current else branch_of[u["first"]]
        u["href"] = href(b, u["first"])
        label = f"#{u['first']}" if not u["count"] or u["first"] == u["last"] else f"#{u['first']}–#{u['last']}"
        what = (f"{u['count']} messages (a linear run)" if u["count"] > 1
                else u["role"] + (" (sampled)" if u["sampled"] else ""))
        u["title"] = f"{label} · {what}" + (f" · {NODE_KINDS[u['kind']]}" if u["kind"] else "")
        if u["parent_unit"] is not None:
            p = units[u["parent_unit"]]
            edges.append({"x1": p["x"], "y1": p["y"], "x2": u["x"], "y2": u["y"],
                          "current": p["current"] and u["current"]
                          or (u["first"] in on_current and p["last"] in on_current),
                          "kind": u["kind"]})
    return edges
