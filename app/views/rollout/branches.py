"""The rollout's branches: each root-to-leaf path with the training sample it becomes, where and
why it forks from the branches before it, the branch it is compared with side by side, the
branches re-rendered without earlier messages, and the drawn message graph's links."""
from __future__ import annotations

from app import urls
from app.views import graph_svg
from app.views.rollout.links import NodeLinks
from ingest.graph import samples


def branch_views(gnodes, paths: list[list[int]], forks: list, link: NodeLinks) -> list[dict]:
    """One row per branch (BranchView). Each is compared with the branch it forked from, else its
    neighbour (`compare_url`: the side-by-side page)."""
    sample_of = samples(gnodes, paths)
    rows = [{"index": b, "nodes": len(p), "leaf": p[-1] if p else None, "url": link.page_url(b, 0),
             "sample": sample_of[b], "fork": forks[b],
             "n_tokens": sum(gnodes[i].n_tokens for i in p), "n_trained": sum(gnodes[i].n_trained for i in p)}
            for b, p in enumerate(paths)]
    for b, row in enumerate(rows):
        other = (forks[b] or {}).get("from_branch")
        other = other if other is not None else (b - 1 if b else (1 if len(paths) > 1 else None))
        row["compare_with"] = other
        row["compare_url"] = urls.rollout(link.run_id, link.rollout_id, json=link.json, branch=b, vs=other,
                                          attempt=link.attempt) if other is not None else None
    return rows


def rerendered(forks: list, paths: list[list[int]]) -> tuple[list[tuple[int, int]], list[set[int]]]:
    """A prompt re-rendered (or compacted) into a new branch after a message, without it: that
    message's reasoning was not in the context of the later turns. → ([(first node, branch)],
    each branch's node set, only when there is such a branch)."""
    out = [(f["first"], b) for b, f in enumerate(forks)
           if f and f["reason"] in ("rerender", "compaction") and f["first"] is not None]
    return out, ([set(p) for p in paths] if out else [])


# The most graph nodes a twin's first page carries unasked (about 260 bytes each): a 5,000-turn
# rollout's 10,002 nodes made its first page 1.2 MB; above this the page links them (`graph_url`).
TWIN_GRAPH_BUDGET = 1_000


def graph_fields(gnodes, paths: list[list[int]], link: NodeLinks, *, with_graph: bool) -> dict:
    """The drawn graph (`svg`) and, in the JSON twin, the whole graph with `with_graph`, or on a
    branch's first page of a graph of at most TWIN_GRAPH_BUDGET nodes (`graph`), else the link to
    it (`graph_url`, the same page with `graph=1`)."""
    json, branch, offset = link.json, link.branch, link.offset

    def graph_href(b: int, idx: int) -> str:
        return urls.rollout(link.run_id, link.rollout_id, json=json, branch=b, attempt=link.attempt,
                            focus=f"m-{idx}") + f"#m-{idx}"

    whole = with_graph or (offset == 0 and len(gnodes) <= TWIN_GRAPH_BUDGET)
    return {"graph": graph_svg.graph_data(gnodes, paths) if json and whole else None,
            "graph_url": link.page_url(branch, offset, graph=1) if json and not whole else None,
            "svg": graph_svg.layout(gnodes, paths, branch, graph_href)}

