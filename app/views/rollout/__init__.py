"""One rollout's page: header, attempts, envelope, findings, the drawn message graph, branches
(each labelled with the sample it becomes and why it forked), and one page of the messages of
one branch, each with its tool calls paired to results and its token strip.

`rollout_page` composes the parts, one module each: `findings` (stored findings and their
links), `links` (node links, attempts, the list the reader came from, deep-link focus),
`timeline` (model and tool calls on one time axis), `branches` (branch rows, side-by-side links,
the drawn graph), `messages` (one page of messages), `windows` (token strips, chips and the
windows a long strip loads by), `models` (the page's shape, its JSON twin)."""
from __future__ import annotations

from sqlmodel import Session

from app import urls
from app.config import WebSettings
from app.queries import annotations as q_annotations
from app.queries import findings as q_findings
from app.queries import graph as q_graph
from app.queries import nodes as q_nodes
from app.queries import rollout_list
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.store.media import stored_media
from app.views import tokens as tokenview
from app.views.common import iso, note_view, num, summary_fields, with_labels
from app.views.rollout import branches as branchview
from app.views.rollout import links
from app.views.rollout.findings import link_findings, page_findings
from app.views.rollout.messages import MessageContext, message_views, pair_calls, with_stored
from app.views.rollout.models import RolloutHeader, RolloutPage
from app.views.rollout.rewards import component_views
from app.views.rollout.timeline import timeline
from app.views.rollout.windows import Pieces, _declares_byte_level, _load_vocab
from app.views.rollouts import with_finding_links
from ingest.graph import branches, fork_points, pair_tool_calls
from ingest.stats import gradient_tokens, own_no_gradient

# Tokens on one page of the JSON twin above which its per-token arrays are left out (a twin's token
# costs ~540 bytes as chips and arrays: a 200,000-token rollout's twin was 107.5 MB): the twin stays
# under ~4.5 MB and links the token API instead (`tokens_omitted`; 200,000 tokens: 0.19 MB).
TWIN_TOKEN_BUDGET = 8_000


def rollout_page(session: Session, run_id: str, rollout_id: str, *, web: WebSettings, branch: int = 0,
                 offset: int = 0, attempt: int | None = None, all_tokens: bool = False, limit: int | None = None,
                 focus: str | None = None, came_from: tuple[rollout_list.RolloutFilters, str | None] | None = None,
                 json: bool = False, with_graph: bool = False) -> RolloutPage | None:
    """The rollout page: header, findings, the drawn message graph, branches (each labelled with
    the sample it becomes and why it forked), and one page of messages of one branch.

    `attempt=None` shows the latest attempt. Every attempt of the rollout id is listed with its
    link (the one shown marked `current`); when there are several, the page's own links (branches,
    pages, nodes) name the attempt shown.

    `focus` (`m-N`, `node-N` or `t-N`, a deep link's fragment) opens the page of messages that
    holds message N or branch token N, with that token's window drawn; `range` then says which
    messages are shown ("messages 100–122 of 123") and `prev_url` loads the earlier ones.

    The JSON twin (`json`) carries the whole message graph on a branch's first page (offset 0)
    or when `with_graph`; other pages link it (`graph_url`) rather than repeat it. It carries
    every token of its messages up to `TWIN_TOKEN_BUDGET`; above it, `tokens_omitted` says so and
    links the branch's token arrays in the API.

    `came_from`: the filters and sort of the rollouts list the reader came from; `list_nav` then
    links the previous and next rollout of that list in its order (app.queries.rollout_list, the
    list page's own engine), and back to it. Links go to the JSON twins when
    `json`."""
    limit = limit or web.messages_per_page
    row = q_rollouts.get_rollout(session=session, run_id=run_id, rollout_id=rollout_id, attempt=attempt)
    if row is None:
        return None
    tries = q_rollouts.rollout_attempts(session=session, run_id=run_id, rollout_id=rollout_id)
    attempts = links.attempt_views(tries, row, run_id, rollout_id, json)
    run = q_runs.get_run(session=session, run_id=run_id)
    envelope = q_rollouts.get_envelope(session=session, rollout_pk=row.pk)
    findings, skipped, findings_by_node = page_findings(q_findings.get_findings(session=session, rollout_pk=row.pk))
    headers: dict[int, dict] = {}
    gnodes = q_graph.graph_nodes(session=session, rollout_pk=row.pk, headers=headers)
    paths = branches(gnodes) if gnodes else []
    branch, offset, path, starts, focus_pos, focus_token = links.place(gnodes, paths, branch, offset, limit, focus)
    pinned = row.attempt if attempt is not None or len(attempts) > 1 else None
    link = links.NodeLinks(run_id, rollout_id, paths, branch, offset, limit, pinned, json)
    link_findings(findings, link, links.token_offsets(link, paths, gnodes))
    messages = [headers.get(i, {"role": "user"}) for i in range(len(gnodes))] if gnodes else []
    pairs = pair_tool_calls(path, messages)
    page = path[offset:offset + limit]
    tokens_omitted = None
    if json and all_tokens:  # the twin: every token, unless that would make it tens of MB
        on_page = sum(gnodes[i].n_tokens for i in page) if gnodes else 0
        if on_page > TWIN_TOKEN_BUDGET:
            all_tokens = False  # drawn as the HTML page draws them: a first window, the rest linked
            tokens_omitted = {
                "tokens": on_page, "budget": TWIN_TOKEN_BUDGET,
                "tokens_url": urls.api_branch_tokens(run_id, rollout_id, branch, attempt=pinned),
                "note": f"{on_page:,} tokens on this page, over the twin's budget of {TWIN_TOKEN_BUDGET:,}: "
                        "per-token arrays (token_ids, mask, logprobs, advantages) are left out and each message "
                        "draws only its first tokens (`segments` link the rest); every array of the branch is at "
                        "tokens_url (JSON, or a NumPy .npz with `Accept: application/x-ndarray`)"}
    vocab = _load_vocab(session, run.tokenizer_sha256 if run else None)
    forks = fork_points(gnodes, paths)
    ctx = _message_context(run, envelope, vocab, pairs, page, link, messages, findings_by_node, forks, paths,
                           row.pk, all_tokens, web)
    nodes = q_nodes.get_nodes(session=session, rollout_pk=row.pk, idxs=page)
    node_views = message_views(nodes, ctx, starts, {idx: offset + k for k, idx in enumerate(page)},
                               focus_pos, focus_token)
    shas = {m["sha256"] for v in node_views for m in v["media"] if m["sha256"]}
    with_stored(node_views, stored_media(session, shas), web.media_max_bytes)
    summary = with_labels(session, run_id, [summary_fields(row, n_attempts=len(attempts), json=json)])[0]
    labels = q_annotations.labels_of(session=session, run_id=run_id, rollout_ids=[rollout_id]).get(rollout_id, [])
    notes = q_annotations.notes_of(session=session, run_id=run_id, rollout_id=rollout_id)
    header = RolloutHeader.model_validate(summary)  # its findings: its own kinds and its group's, as a list row
    with_finding_links(session, run_id, [header], lambda kind: urls.rollouts(run_id, json=json, flag=kind))
    return RolloutPage.model_validate({
        "run": {"id": run_id, "name": run.name if run else None, "url": urls.run(run_id, json=json),
                "tokenizer": bool(vocab)},
        "rollout": header,
        "list_nav": links.list_nav(session, run_id, row, came_from, json),
        "attempts": attempts,
        **_envelope_fields(envelope, summary, findings, pairs, messages, link),
        "findings": findings,
        "labels": [{"label": r.label, "author": r.author, "created_at": iso(r.created_at)} for r in labels],
        "notes": [note_view(n) for n in notes],
        "checks_skipped": skipped,
        **_token_fields(summary, node_views),
        "branches": branchview.branch_views(gnodes, paths, forks, link),
        "branch": branch,
        **branchview.graph_fields(gnodes, paths, link, with_graph=with_graph),
        "offset": offset,
        "limit": limit,
        "focus": focus,
        "range": {"first": offset, "last": offset + len(node_views) - 1, "total": len(path)} if node_views else None,
        "messages": node_views,
        "messages_total": len(path),
        "tokens_omitted": tokens_omitted,
        **links.page_links(link, len(paths), len(path)),
    })


def _message_context(run, envelope, vocab, pairs, page, link, messages, findings_by_node, forks, paths,
                     rollout_pk: int, all_tokens: bool, web: WebSettings) -> MessageContext:
    """What the page's messages are drawn with (messages.MessageContext)."""
    calls_by_node, answer_of = pair_calls(pairs, set(page), link, messages)
    rerendered, member = branchview.rerendered(forks, paths)

    def window_url(idx: int, s: int, e: int) -> str:
        return urls.rollout(link.run_id, link.rollout_id, json=link.json, branch=link.branch, attempt=link.attempt,
                            node=idx, **{"from": s, "to": e})

    return MessageContext(
        pieces=Pieces(vocab, byte_level=_declares_byte_level(run, envelope)), calls_by_node=calls_by_node,
        answer_of=answer_of, findings_by_node=findings_by_node, run_id=link.run_id, rollout_pk=rollout_pk,
        all_tokens=all_tokens, web=web, window_url=window_url, budget=[web.tokens_inline],
        rerendered=rerendered, member=member)


def _envelope_fields(envelope: dict, summary: dict, findings: list[dict], pairs, messages, link) -> dict:
    """The envelope as stored (ending, rewards, task, calls with `node_url`, errors, timing,
    metrics, extra), the timeline, and what the page warns of (environment tokens trained,
    nothing trained, no gradient)."""
    model_calls = [dict(c, node_url=link(c.get("node"))) if isinstance(c, dict) else c
                   for c in envelope.get("calls", [])]
    # the group default (ingest.advantages) drops errors: an errored rollout has no gradient
    why_none = own_no_gradient(summary)
    task = envelope.get("task")
    return {
        "ending": envelope.get("ending", {"type": summary["ending"]}),
        "rewards": envelope.get("rewards", {}),
        "reward_components": component_views(envelope.get("rewards"), summary["reward"]),
        "reward": num(summary["reward"]),
        "reward_status": summary["reward_status"],
        "task": task,
        "task_answer": _task_answer(task),
        "calls": model_calls,
        "timeline": timeline(model_calls, pairs, messages, link),
        "errors": envelope.get("errors", []),
        "timing": envelope.get("timing", {}),
        "metrics": envelope.get("metrics", {}),
        "extra": envelope.get("extra", {}),
        "n_trained_environment": sum((f["detail"] or {}).get("count", 0) for f in findings
                                     if f["kind"] == "mask_on_unsampled"),
        # pads and tokens after the EOS carry mask 1 but were never generated: not counted as sampled
        "n_trained_padding": sum((f["detail"] or {}).get("count", 0) for f in findings
                                 if f["kind"] == "mask_on_padding"),
        # Tokens were recorded but none carries loss: a filter (Tunix overlong_filter) zeroed the
        # mask. Shown, but it trains on nothing.
        "trains_on_nothing": summary["n_tokens"] > 0 and summary["n_trained_tokens"] == 0 and summary["n_turns"] > 0,
        # mask-1 tokens of an errored (or trainer-filtered) rollout carry no gradient under the default policy
        "no_gradient": why_none in ("error_dropped", "trainer_filtered"),
        "no_gradient_reason": why_none,
        "n_gradient_tokens": gradient_tokens(summary),  # the rollouts list's "trained" column: one definition
    }


def _token_fields(summary: dict, node_views: list[dict]) -> dict:
    """The token legend explains what is drawn: only when there are tokens, and the tokenizer
    note only when some token on this page is drawn as a bare id; overlays and Δ outliers."""
    drawn = [t for m in node_views for t in m["tokens"]]
    return {
        "has_tokens": summary["n_tokens"] > 0,
        "bare_ids": any(t["piece"] is None for t in drawn),
        "token_states": tokenview.state_rows(),
        "overlays": tokenview.overlay_legends(),
        "has_trainer_logprobs": any(t["trainer_logprob"] is not None for t in drawn),
        "delta_outliers": tokenview.outliers(drawn),
    }


def _task_answer(task) -> object | None:
    """The task's reference answer where the source has one (`task.data.answer`, or
    `reference_answer` / `ground_truth` / `target`)."""
    data = (task or {}).get("data") if isinstance(task, dict) else None
    if isinstance(data, dict):
        for k in ("answer", "reference_answer", "ground_truth", "target", "solution"):
            if data.get(k) is not None:
                return data[k]
    return None
