"""Serving: the HTTP API and web page (`strata serve`) and the MCP server (`strata mcp`) over one corpus."""
