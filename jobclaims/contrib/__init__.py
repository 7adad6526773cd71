"""Integrations with monitoring tools, each installed with an extra of its own."""
