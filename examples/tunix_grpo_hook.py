"""Hook Rollscope into a Tunix GRPO loop: every rollout the orchestrator produces goes to the
spool (or a Rollscope server), and its page URL is printed next to the step's loss.

In a Tunix 0.1.x GRPO learner (`tunix/rl/agentic/...`), the `RolloutOrchestrator` yields batches
of `TrajectoryItem`s, one batch per GRPO group. Hand each batch to the hook before the learner
consumes it::

    hook = RollscopeHook("/shared/spool", run="grpo-gsm8k-7")      # or "http://host:8000", token=...
    for step, batch in enumerate(orchestrator_batches):
        hook.on_batch(batch, step=step)
        loss = learner.train_step(batch)

Nothing here imports Tunix: the client reads the objects by duck typing, and the worker reads
them with Rollscope's Tunix reader (ingest/formats/tunix.py).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rollscope.client import RolloutWriter


class RollscopeHook:
    """Sends each GRPO batch (a list of TrajectoryItem objects, or Trajectories) to Rollscope."""

    def __init__(self, target: str, run: str, *, log=print, **writer_options: Any):
        self.writer = RolloutWriter(target, run=run, **writer_options)
        self.log = log

    def on_batch(self, batch: Iterable[Any], step: int) -> list[str]:
        """Write one batch; prints and returns the rollouts' URLs."""
        urls = self.writer.write_many(batch)
        for url in urls:
            self.log(f"step {step} rollout: {url}")
        return urls

    def close(self) -> None:
        self.writer.close()
