"""Prometheus metrics of claims, fed from jobclaims' signals.

Install with ``pip install jobclaims[prometheus]`` and add
``"jobclaims.contrib.prometheus"`` to ``INSTALLED_APPS``; docs/monitoring.md
lists the metrics and how to collect them from servers and from cron.
"""
