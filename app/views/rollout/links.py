"""The rollout page's links: to any node (on this page, another page, another branch), to each
attempt of the rollout id, to the previous and next rollout of the list the reader came from,
and a deep link's target (`focus`) resolved to a branch, a page and a token."""
from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

import numpy as np

from app import urls
from app.errors import ApiError
from app.queries import rollout_list
from app.views.common import num, pins_attempt


class NodeLinks:
    """Where a link to node N must go: `#m-N` when N is on the page being viewed, else
    `?branch=B&offset=O#m-N` with B the current branch if it holds N (else the first branch
    that does) and O the start of the page holding N. A node's position is its depth, the same
    on every branch that holds it."""

    def __init__(self, run_id: str, rollout_id: str, paths: list[list[int]], branch: int, offset: int, limit: int,
                 attempt: int | None, json: bool = False):
        self.json = json
        self.run_id, self.rollout_id = run_id, rollout_id
        self.paths, self.branch, self.offset, self.limit = paths, branch, offset, limit
        self.attempt = attempt
        self.current = {idx: p for p, idx in enumerate(paths[branch])} if paths else {}
        self._first: dict[int, tuple[int, int]] | None = None

    def _locate(self, idx: int) -> tuple[int, int] | None:
        if idx in self.current:
            return self.branch, self.current[idx]
        if self._first is None:  # built once, only when a link leaves the current branch
            self._first = {}
            for b, path in enumerate(self.paths):
                for p, i in enumerate(path):
                    self._first.setdefault(i, (b, p))
        return self._first.get(idx)

    def page_url(self, branch: int, offset: int, **more) -> str:
        return urls.rollout(self.run_id, self.rollout_id, json=self.json, branch=branch, offset=offset,
                            attempt=self.attempt, **more)

    def __call__(self, idx) -> str | None:
        if not isinstance(idx, int):
            return None
        where = self._locate(idx)
        if where is None:
            return None
        b, p = where
        if b == self.branch and self.offset <= p < self.offset + self.limit:
            return f"#m-{idx}"
        return f"{self.page_url(b, p // self.limit * self.limit)}#m-{idx}"


def span(xs: list[int]) -> str:
    """`[0, 1, 2, 7]` → "0–2, 7": a short list of numbers for an error message."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    out = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs[:8])
    return out + (", …" if len(runs) > 8 else "")


def check_branch(branch: int, paths: list[list[int]], *, field: str = "branch") -> None:
    """422 (ApiError, naming `field`) unless `branch` is a branch of this rollout (0..len-1)."""
    if not 0 <= branch < len(paths):
        raise ApiError(422, f"{field} must be 0..{len(paths) - 1}: this rollout has {len(paths)} branches"
                       if paths else f"{field}: this rollout has no messages", field=field)


def resolve_focus(focus: str | None, paths: list[list[int]], branch: int, starts) -> tuple[int, int | None, int | None]:
    """A deep link's target → (branch, position on the branch, token index within that node).

    `m-N` / `node-N`: message N, on `branch` when it holds N, else on the first branch that does.
    `t-N`: token offset N of the branch's token sequence. A message no branch holds, or a token
    past the branch's last, raises ApiError 422 (field `focus`)."""
    if not focus:
        return branch, None, None
    kind, _, num = focus.partition("-")
    n = int(num)  # the route's pattern guarantees digits
    if kind in ("m", "node"):
        if paths and n in paths[branch]:
            return branch, paths[branch].index(n), None
        for b, p in enumerate(paths):
            if n in p:
                return b, p.index(n), None
        count = len({i for p in paths for i in p})
        raise ApiError(422, f"focus: no message {n}; this rollout has messages 0..{count - 1}" if count
                       else f"focus: no message {n}; this rollout has no messages", field="focus")
    total = int(starts[-1]) if len(starts) else 0
    if n >= total:
        raise ApiError(422, f"focus: no token {n}; branch {branch} has tokens 0..{total - 1}" if total
                       else f"focus: no token {n}; branch {branch} has no tokens", field="focus")
    pos = int(np.searchsorted(starts, n, side="right")) - 1
    return branch, pos, n - int(starts[pos])



def token_offsets(link: NodeLinks, paths: list[list[int]], gnodes) -> Callable[[int], int | None]:
    """`offset(idx)`: the branch offset of node idx's first token on the branch `link` sends it
    to (None when no branch holds it); each branch's offsets are summed once, when first asked."""
    offsets: dict[int, dict[int, int]] = {}  # branch → node → offset of its first token

    def token_offset(idx: int) -> int | None:
        where = link._locate(idx)
        if where is None:
            return None
        b = where[0]
        if b not in offsets:
            acc, offsets[b] = 0, {}
            for i in paths[b]:
                offsets[b][i] = acc
                acc += gnodes[i].n_tokens
        return offsets[b][idx]

    return token_offset


def attempt_views(tries, row, run_id: str, rollout_id: str, json: bool) -> list[dict]:
    """Every attempt of the rollout id (`tries`, oldest first) with its link; `row`'s is current."""
    return [{"attempt": a.attempt, "step": a.step, "ending": a.ending, "ending_detail": a.ending_detail,
             "reward": num(a.reward), "reward_status": a.reward_status,
             "url": urls.rollout(run_id, rollout_id, json=json,
                                 attempt=a.attempt if pins_attempt(a.attempt, len(tries)) else None),
             "current": a.attempt == row.attempt, "latest": i == len(tries) - 1}
            for i, a in enumerate(tries)]


def list_nav(session, run_id: str, row, came_from, json: bool) -> dict | None:
    """The previous and next rollout of the list the reader came from (`came_from`: its filters
    and sort; app.queries.rollout_list, the list page's own engine), and the list itself."""
    if came_from is None:
        return None
    filters, sort = came_from
    before, after = rollout_list.neighbours(session=session, run_id=run_id, filters=filters, sort=sort, row=row)
    keep = {**filters.as_query(), **({"sort": sort} if sort else {})}
    listq = urlencode(keep)

    def there(n):
        return urls.rollout(n.run_id, n.rollout_id, json=json, attempt=n.attempt or None, list=listq) if n else None

    return {"prev_url": there(before), "next_url": there(after), "prev": before.rollout_id if before else None,
            "next": after.rollout_id if after else None,
            "list_url": urls.rollouts(run_id, json=json, **keep)}


def page_links(link: NodeLinks, n_paths: int, path_len: int) -> dict:
    """The page's own links: neighbour branches, earlier and later pages of messages, all tokens."""
    branch, offset, limit = link.branch, link.offset, link.limit
    nxt = offset + limit if offset + limit < path_len else None
    return {
        "branch_prev_url": link.page_url(branch - 1, 0) if branch > 0 else None,
        "branch_next_url": link.page_url(branch + 1, 0) if branch + 1 < n_paths else None,
        "prev_offset": max(0, offset - limit) if offset > 0 else None,
        "prev_url": link.page_url(branch, max(0, offset - limit), limit=min(limit, offset) if offset < limit else None)
                    if offset > 0 else None,
        "next_offset": nxt,
        "next_url": link.page_url(branch, nxt) if nxt is not None else None,
        "all_tokens_url": link.page_url(branch, offset, tokens="all"),
    }


def _starts(gnodes, path: list[int]):
    """Branch offset of each node's first token on `path`, and the branch's token count last."""
    return np.concatenate([[0], np.cumsum([gnodes[i].n_tokens for i in path])])


def place(gnodes, paths: list[list[int]], branch: int, offset: int, limit: int, focus: str | None):
    """Which page of which branch to show → (branch, offset, path, starts, focus position,
    focus token): a deep link (`focus`) moves to the branch and page that hold its target. 422
    (ApiError) for a branch, focus or offset this rollout does not have."""
    if paths or branch:
        check_branch(branch, paths)
    starts = _starts(gnodes, paths[branch]) if paths else np.zeros(1)
    branch, focus_pos, focus_token = resolve_focus(focus, paths, branch, starts)
    path = paths[branch] if paths else []
    if paths and focus_pos is not None:
        starts = _starts(gnodes, path)
        offset = focus_pos // limit * limit
    if offset and offset >= len(path):
        raise ApiError(422, f"offset must be 0..{max(0, len(path) - 1)}: branch {branch} has "
                       f"{len(path)} messages", field="offset")
    return branch, offset, path, starts, focus_pos, focus_token
