"""memrl as a service: the memory REST API and web browser, the MCP server, the reward server.

Each needs an optional extra (``pip install memrl[serve]`` / ``memrl[mcp]``), imported only when used.
"""
