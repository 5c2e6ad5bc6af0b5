"""Reads, one module per resource: runs, rollouts, nodes, groups, findings, quarantine (plus
`common`: tables, bounds, the ending list and the reward sums they share).

Keyword-only functions, the session passed explicitly. List queries select summary columns only;
message bodies and token arrays are read one rollout (and one page of nodes) at a time. Views
(app/views) turn these rows into page models; nothing here builds a URL or formats text.
"""
