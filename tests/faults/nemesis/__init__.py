"""The project's own nemesis: real job processes race windows on a cluster
while faults are injected at random moments (see tests/faults/nemesis/run.py)."""
