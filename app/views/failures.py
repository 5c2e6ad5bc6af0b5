"""A run's failure signatures (`/runs/{run}/failures`, its twin, `GET /api/v1/runs/{run}/failures`):
the recurring templates of errors, tool errors and failed rollouts' last words, mined at ingest
(app/store/signatures.py, docs/failures.md), most frequent first, with their steps."""
from __future__ import annotations

from sqlmodel import Session

from app import urls
from app.queries import runs as q_runs
from app.queries import signatures as q_sig
from app.views.chart import RunRef
from app.views.common import PageModel
from ingest.signatures import MAX_TEMPLATES, OTHER, new_at_step


class StepCount(PageModel):
    step: int | None
    count: int


class SignatureExample(PageModel):
    """A rollout carrying the signature; `kind`: where it was met (error, tool_error, final_message)."""

    rollout_id: str
    attempt: int
    step: int | None
    ending: str
    kind: str
    url: str


class SignatureView(PageModel):
    """One signature. `id`: its number in the run (stable; the `signature=` filter); `count`:
    failed rollouts carrying it; `rollouts`: every rollout carrying it (a tool error a rollout
    recovered from counts here only); `share`: count / the run's failed rollouts (None when none
    failed); `first_step` / `last_step` / `per_step`: over the failed rollouts carrying it, by
    step; `new_at_step`: the step it arrived at (ingest.signatures.new_at_step), or None;
    `examples`: up to 5 rollouts (failed first, latest step first); `rollouts_url`: the rollouts
    list filtered by it; `other`: the bucket of texts beyond the cap of templates."""

    id: int
    template: str
    count: int
    rollouts: int
    share: float | None
    first_step: int | None
    last_step: int | None
    per_step: list[StepCount]
    new_at_step: int | None
    examples: list[SignatureExample]
    rollouts_url: str
    url: str
    other: bool


class FailuresPage(PageModel):
    """`failed_rollouts` of `rollouts` in the run; `steps`: the run's first and last step (the
    sparklines' axis, [None, None] without steps); `cap`: templates kept per run."""

    run: RunRef
    failed_rollouts: int
    rollouts: int
    steps: list[int | None]
    cap: int
    signatures: list[SignatureView]


def signature_views(session: Session, run_id: str, *, json: bool = False,
                    with_examples: bool = True, with_share: bool = True) -> list[SignatureView]:
    """The run's signatures, most failed rollouts first (then most rollouts, then id); "other"
    last. `with_examples=False` leaves `examples` empty (one query fewer); `with_share=False`
    leaves `share` None (no count of the run's failed rollouts: a scan of all its rollouts, 0.2 s
    at 200,000)."""
    failed = q_sig.failed_rollouts(session=session, run_id=run_id)[0] if with_share else None
    steps = q_sig.run_steps(session=session, run_id=run_id)
    examples = q_sig.examples(session=session, run_id=run_id) if with_examples else {}
    out = []
    for s in q_sig.signature_counts(session=session, run_id=run_id):
        stepped = sorted(k for k in s.failed_by_step if k is not None)
        per_step = [StepCount(step=k, count=s.failed_by_step[k]) for k in stepped]
        if None in s.failed_by_step:
            per_step.append(StepCount(step=None, count=s.failed_by_step[None]))
        count = s.count
        out.append(SignatureView(
            id=s.number, template=s.template, count=count, rollouts=s.rollouts,
            share=count / failed if failed else None,
            first_step=stepped[0] if stepped else None, last_step=stepped[-1] if stepped else None,
            per_step=per_step,
            new_at_step=None if s.number == OTHER else new_at_step(steps, {k: v for k, v in s.failed_by_step.items()
                                                                           if k is not None}),
            examples=[SignatureExample(**e, url=urls.rollout(run_id, e["rollout_id"], json=json,
                                                             attempt=e["attempt"] or None))
                      for e in examples.get(s.pk, [])],
            rollouts_url=urls.rollouts(run_id, json=json, signature=s.number),
            url=urls.failures(run_id, json=json) + f"#signature-{s.number}",
            other=s.number == OTHER))
    out.sort(key=lambda v: (v.other, -v.count, -v.rollouts, v.id))
    return out


def failures_page(session: Session, run_id: str, *, json: bool = False) -> FailuresPage | None:
    """The failures page of run `run_id` (None when there is no such run); `json`: every link to
    a JSON twin."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    failed, total = q_sig.failed_rollouts(session=session, run_id=run_id)
    steps = q_sig.run_steps(session=session, run_id=run_id)
    return FailuresPage(run=RunRef(id=run.id, name=run.name, url=urls.run(run.id, json=json)),
                        failed_rollouts=failed, rollouts=total,
                        steps=[steps[0], steps[-1]] if steps else [None, None], cap=MAX_TEMPLATES,
                        signatures=signature_views(session, run_id, json=json))


def new_at(session: Session, run_id: str, step: int, *, json: bool = False) -> list[dict]:
    """The signatures new at `step` (new_at_step == step), for the step story: id, template,
    count at that step, the failures page's anchor (`url`) and the step's rollouts carrying it
    (`rollouts_url`)."""
    out = []
    for v in signature_views(session, run_id, json=json, with_examples=False, with_share=False):
        if v.new_at_step == step:
            at = next((c.count for c in v.per_step if c.step == step), 0)
            out.append({"id": v.id, "template": v.template, "count": at, "url": v.url,
                        "rollouts_url": urls.rollouts(run_id, json=json, step=step, signature=v.id)})
    return out
