"""Subcommand handlers that are more than a few lines, one module per command group."""
