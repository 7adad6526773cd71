from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PrometheusConfig(AppConfig):
    name = "jobclaims.contrib.prometheus"
    label = "jobclaims_prometheus"
    verbose_name = _("Job claims: Prometheus metrics")

    def ready(self) -> None:
        from jobclaims.contrib.prometheus.metrics import connect

        connect()
