"""The rollouts list filtered by a failure signature (`?signature=N`) says which signature that
is: its template, escaped, in the filter's heading and in the twin (`signature`), through the
real HTTP app on SQLite and Postgres."""
from __future__ import annotations

from tests.helpers import ingest, rollout, write_jsonl

EVIL = "<script>alert(1)</script> broke & failed at /srv/x/y.py"


def test_the_filtered_list_names_the_signature(client, engine, tmp_path):
    rs = [rollout(f"e{i}", ending="error", reward=None, step=i,
                  errors=[{"type": "Boom", "message": f"{EVIL} attempt {i}"}]) for i in range(4)]
    rs.append(rollout("fine", reward=1.0, step=0))
    assert ingest(engine, write_jsonl(tmp_path / "sig.jsonl", rs)).ok
    sigs = client.get("/runs/r1/failures.json").json()["signatures"]
    top = next(s for s in sigs if "alert" in s["template"])
    twin = client.get(f"/runs/r1/rollouts.json?signature={top['id']}").json()
    assert twin["signature"] == {"id": top["id"], "template": top["template"], "url": "/runs/r1/failures.json"}
    page = client.get(f"/runs/r1/rollouts?signature={top['id']}").text
    heading = page[page.index('id="signature-filter"'):]
    heading = heading[:heading.index("</p>")]
    assert "&lt;script&gt;alert(&lt;NUM&gt;)&lt;/script&gt; broke &amp; failed" in heading
    assert f'href="/runs/r1/failures#signature-{top["id"]}"' in heading
    assert "<script>alert" not in page
    # a signature the run does not have says so; no filter, no heading
    assert "this run has no such signature" in client.get("/runs/r1/rollouts?signature=999").text
    assert client.get("/runs/r1/rollouts.json?signature=999").json()["signature"]["template"] is None
    assert 'id="signature-filter"' not in client.get("/runs/r1/rollouts").text
    assert client.get("/runs/r1/rollouts.json").json()["signature"] is None
