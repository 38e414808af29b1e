"""The engine side of the gateway: protocol.md lines, the supervised `strata --serve` process, the request queue."""
