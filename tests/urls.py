from django.contrib import admin
from django.urls import path
from health_check.views import HealthCheckView

from jobclaims.contrib.prometheus.views import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "health/",
        HealthCheckView.as_view(
            checks=["health_check.checks.Database", "jobclaims.contrib.health_check.ScheduledJobs"]
        ),
    ),
    path("metrics/", metrics),
]
