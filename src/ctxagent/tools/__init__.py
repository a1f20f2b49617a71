"""Tools: the built-ins, the toolset that calls them, and the offload wrapper around every result."""
