"""`rollscope mcp`: a read-only Model Context Protocol server for coding agents (docs/mcp.md).

reader.py gets the pages' JSON twins (in-process, or over HTTP from a running server),
answers.py turns one twin into concise text plus structured content (pure functions), and
server.py registers the eight tools on the official `mcp` SDK. Nothing here writes.
"""
