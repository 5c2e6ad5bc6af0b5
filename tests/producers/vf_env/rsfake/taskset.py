import verifiers.v1 as vf

from rsfake.servers.tool import RsfakeToolset

# The cases, in task order; the fake model server (tests/producers/fake_openai.py) scripts each by name.
CASES = ["tool", "tool-error", "max-turns", "length", "provider-error", "provider-503", "group"]


class RsfakeData(vf.TaskData):
    case: str = ""


class RsfakeTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class RsfakeTask(vf.Task[RsfakeData, vf.State, RsfakeTaskConfig]):
    @classmethod
    def toolsets(cls, config: RsfakeTaskConfig) -> list[vf.Toolset]:
        return [RsfakeToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def answered(self, trace: vf.Trace) -> float:
        text = str(trace.nodes[-1].message.content or "") if trace.nodes else ""
        return 1.0 if "<answer>" in text else 0.0

    @vf.reward(weight=0.5)
    async def brief(self, trace: vf.Trace) -> float:
        return 1.0 if len(trace.nodes) <= 4 else 0.0

    @vf.metric
    async def nodes(self, trace: vf.Trace) -> float:  # a metric: recorded, not part of the reward
        return float(len(trace.nodes))


class RsfakeConfig(vf.TasksetConfig):
    cases: list[str] = CASES
    task: RsfakeTaskConfig = RsfakeTaskConfig()


class RsfakeTaskset(vf.Taskset[RsfakeTask, RsfakeConfig]):
    def load(self) -> list[RsfakeTask]:
        return [RsfakeTask(RsfakeData(case=c, prompt=f"[case:{c}] What is 2 + 3? Use the calculator, "
                                                     "then reply with <answer>N</answer>."),
                           self.config.task) for c in self.config.cases]
