"""When a worker started a task fire's run: NULL while its message waits in the queue.

A schedule whose target is a task (jobclaims.scheduled()) is claimed by the
scheduler that enqueues it and adopted by the worker that runs it; the admin,
health and jobclaims_status tell an enqueued fire from a started one by this
column. Nullable, with no default: adding it rewrites no row.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0011_job_run_series'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='started_at',
            field=models.DateTimeField(blank=True, help_text="When a worker started a task fire's run; empty while it waits in its queue.", null=True, verbose_name='started at'),
        ),
    ]
