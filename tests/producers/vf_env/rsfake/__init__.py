"""A verifiers v1 environment for tests/producers/test_verifiers.py (laid out as `vf-init -T` scaffolds one):
a calculator toolset, tasks whose prompts carry the `[case:NAME]` marker the fake model server scripts by,
two weighted rewards and a metric."""
from rsfake.taskset import RsfakeTaskset

__all__ = ["RsfakeTaskset"]
