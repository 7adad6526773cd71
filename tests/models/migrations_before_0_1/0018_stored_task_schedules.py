"""Stored schedules that enqueue a task: its dotted path and arguments, and
a command no longer required."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0017_job_tags'),
    ]

    operations = [
        migrations.AddField(
            model_name='storedschedule',
            name='task',
            field=models.CharField(blank=True, help_text='Instead of a command: the Celery or Django task each fire enqueues, by its dotted path (billing.tasks.nightly_report).', max_length=200, verbose_name='task'),
        ),
        migrations.AddField(
            model_name='storedschedule',
            name='task_args',
            field=models.JSONField(blank=True, default=list, help_text='The task\'s positional arguments, a JSON list: ["eu", 3].', verbose_name="task's arguments"),
        ),
        migrations.AddField(
            model_name='storedschedule',
            name='task_kwargs',
            field=models.JSONField(blank=True, default=dict, help_text='The task\'s keyword arguments, a JSON object: {"region": "eu"}.', verbose_name="task's keyword arguments"),
        ),
        migrations.AlterField(
            model_name='storedschedule',
            name='command',
            field=models.CharField(blank=True, help_text='The JobCommand that runs at each fire, by its management command name; empty for a task.', max_length=100, verbose_name='command'),
        ),
    ]
