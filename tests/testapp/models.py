from django.db import models


class Charge(models.Model):
    """One charge made by a run of a test job: the outcome the tests count."""

    job = models.CharField(max_length=200)
    window = models.CharField(max_length=64)
    pid = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=1)
    step = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.job} {self.window} by {self.pid}"
