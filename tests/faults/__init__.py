"""Faults, clusters and nemeses: claims while the databases and hosts fail."""
