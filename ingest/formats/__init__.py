"""Format readers and writers (one module per format) and the toolkit they share.

- `base.py`: the `Reader` protocol, `ReadContext`, `record_error()`; the `Writer` of an export format.
- `registry.py`: the ordered reader list (`READERS`, `detect()`, `names()`, `get()`) and the
  writers by export name (`WRITERS`).
- `_openai.py`, `_responses.py`, `_build.py`: converters shared by readers, one per wire dialect
  (OpenAI chat messages, OpenAI Responses items) and the `RolloutBuilder` for node chains.
- `_harness.py`, `_rl.py`: what agent-harness readers share; Rollscope's own fields under
  `extra.rollscope` (written by the verifiers and ATIF writers, read back by their readers).
- `_<format>_<job>.py`: one job of a format too large for one module (`_atif_steps.py`,
  `_verifiers_write.py`, ...); the format's own module keeps `NAME`, `sniff`, `read`, `write`.
"""
