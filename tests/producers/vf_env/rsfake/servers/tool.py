import verifiers.v1 as vf


class RsfakeToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)


if __name__ == "__main__":
    RsfakeToolset.run()
