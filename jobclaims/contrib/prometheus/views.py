"""The metrics view a server exposes for Prometheus to scrape.

Route it, behind whatever keeps it private::

    path("metrics/", jobclaims.contrib.prometheus.views.metrics)

It serves this process's metrics or, in prometheus-client's multiprocess
mode (``PROMETHEUS_MULTIPROC_DIR`` set), those of every process that shares
the directory; then the gauges of job health, read from the database.
"""

from __future__ import annotations

import os

from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from jobclaims.contrib.prometheus.metrics import health_exposition, read_in_time


def metrics(request: HttpRequest) -> HttpResponse:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        processes = CollectorRegistry()
        MultiProcessCollector(processes)
    else:
        processes = REGISTRY
    body = generate_latest(processes) + health_exposition(read_in_time())
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
