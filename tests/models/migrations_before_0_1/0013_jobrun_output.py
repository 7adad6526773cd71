"""What a JobCommand's run printed, the end of its stdout and stderr, kept with its run.

Written by the run's release, in the statement that records its outcome, and
deleted with the run. Nullable, with no default: adding it rewrites no row,
and NULL (not captured: a run through claim() or a task) differs from ""
(it printed nothing).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0012_task_fire_started_at'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='output',
            field=models.TextField(blank=True, help_text='The end of what the run printed, stdout and stderr; empty if not captured.', null=True, verbose_name='output'),
        ),
    ]
