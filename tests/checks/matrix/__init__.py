"""The fault × format matrix (issue 20): every check kind, proven in every format.

- `episode.py`: the neutral description of a group of rollouts: the messages, and for each
  assistant message the model request that produced it (full prompt ids, completion ids,
  behaviour logprobs, finish reason, cap, usage, timing). `clean_group(tok)` builds a clean group
  with a real tokenizer and chat template, so every id is what a real renderer would write.
- `formats/<name>.py`: one writer per format, writing episodes in that format's own shape (as the
  real tool writes it, from its schema: see each module's docstring), and declaring in `CARRIES`
  which fields the format can hold.
- `faults.py`: one injector per check kind: from a clean group, the same fault, expressed on the
  episode (so every format writes it in its own shape), the fields it needs, and where the
  finding must land (episode, message, token position).
- `harness.py`: write → detect → the real reader (`ingest.files.read_records`) → the checks
  (`ingest.checks`), the path every file takes into the dashboard.
- `table.py`: the kind × format table in docs/checks.md, generated from FAULTS × FORMATS
  (`python -m tests.checks.matrix.table --write`); tests/checks/test_matrix.py proves every cell
  and fails when the docs drift.
"""
