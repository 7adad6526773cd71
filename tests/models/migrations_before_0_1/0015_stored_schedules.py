"""Schedules operators add at runtime, and the count of their changes the
schedulers poll: two new tables, no row of another touched."""

import jobclaims.time.clock
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0014_scheduler_stopped_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='StoredSchedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text="Names its runs: COMMAND[NAME]. Keep it across edits: the runs of a new name are another job's.", max_length=100, unique=True, verbose_name='name')),
                ('command', models.CharField(help_text='The JobCommand that runs at each fire, by its management command name.', max_length=100, verbose_name='command')),
                ('arguments', models.CharField(blank=True, help_text='Passed to the command at each fire, as in a shell: --region eu.', max_length=1000, verbose_name='arguments')),
                ('expression', models.CharField(help_text='A cron expression (0 3 * * *), an interval (every 90 minutes) or a one-off (at 2026-12-24T18:00).', max_length=200, verbose_name='schedule')),
                ('time_zone', models.CharField(blank=True, help_text="The IANA zone the schedule is read in; empty: the command's, else TIME_ZONE.", max_length=64, verbose_name='time zone')),
                ('start', models.CharField(blank=True, help_text="No fire before this date or date-time, in the schedule's zone.", max_length=32, verbose_name='start')),
                ('end', models.CharField(blank=True, help_text='No fire after this date (its whole day) or date-time.', max_length=32, verbose_name='end')),
                ('skip_dates', models.CharField(blank=True, help_text='Dates with no fire, apart by spaces: 2026-12-25 2027-01-01.', max_length=1000, verbose_name='skip dates')),
                ('max_runs', models.PositiveIntegerField(blank=True, help_text='Only the first this many fires from start; needs a start.', null=True, verbose_name='max runs')),
                ('overlap', models.CharField(blank=True, choices=[('skip', 'skip: run nothing for a fire that finds the last run going'), ('allow', 'allow: run it beside the last run'), ('buffer', 'buffer: run it once the last run ends (one waits at most)'), ('replace', 'replace: cancel the last run, then run it')], help_text="What a fire that finds the last run still going does; empty: the command's.", max_length=16, verbose_name='overlap')),
                ('version', models.PositiveIntegerField(default=1, help_text='Counts its edits: an edit made from an older version is refused.', verbose_name='version')),
                ('created_by', models.CharField(max_length=150, verbose_name='created by')),
                ('created_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='created at')),
                ('changed_by', models.CharField(max_length=150, verbose_name='changed by')),
                ('changed_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='changed at')),
            ],
            options={
                'verbose_name': 'stored schedule',
                'verbose_name_plural': 'stored schedules',
                'ordering': ['command', 'name'],
            },
        ),
        migrations.CreateModel(
            name='StoredSchedulesGeneration',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveBigIntegerField(default=0, verbose_name='number')),
            ],
            options={
                'verbose_name': 'stored schedules generation',
                'verbose_name_plural': 'stored schedules generations',
            },
        ),
    ]
