"""The asyncio server: configuration, connections, and the process entry point."""
