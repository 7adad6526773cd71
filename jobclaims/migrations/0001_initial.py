"""The schema of jobclaims 0.1.0, the first release, in one migration.

makemigrations wrote it from the models; the models are put in the order
jobclaims.models lists them: the claims (JobRun, and ScheduledJob, a proxy
that gives the admin's schedules page its place), the skips, the operators'
pauses and retired jobs, then what deploys ran (schedulers seen, schedule
versions, the commands known). It replaces the migrations written while
0.1.0 was built, none of them published, so that a reader finds the schema in
one file; tests/models/test_migrations.py proves that both build the same tables.

It holds the schema and nothing else: no RunPython, and from jobclaims only
the database clock the timestamp columns default to (jobclaims.time.clock).
"""

import jobclaims.time.clock
import uuid
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
    ]

    operations = [
        migrations.CreateModel(
            name='JobRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=200, verbose_name='job')),
                ('window', models.CharField(max_length=64, verbose_name='window')),
                ('schedule', models.CharField(blank=True, help_text="How the job's windows are cut, e.g. hourly; empty if unknown.", max_length=32, verbose_name='schedule')),
                ('status', models.CharField(choices=[('running', 'running'), ('succeeded', 'succeeded'), ('failed', 'failed'), ('retrying', 'retrying'), ('timed-out', 'timed out'), ('cancelled', 'cancelled')], default='running', max_length=16, verbose_name='status')),
                ('owner', models.CharField(help_text='Host, process id and a random per-process id of the holder.', max_length=255, verbose_name='owner')),
                ('token', models.UUIDField(default=uuid.uuid4, help_text='Changes on every claim and takeover.', verbose_name='token')),
                ('attempt', models.PositiveIntegerField(default=1, verbose_name='attempt')),
                ('failures', models.PositiveIntegerField(default=0, help_text="Attempts that failed under a scheduler, counted against the job's retries.", verbose_name='failures')),
                ('retry_at', models.DateTimeField(blank=True, help_text='When a scheduler may run a retrying fire again.', null=True, verbose_name='retry at')),
                ('holds_job', models.BooleanField(editable=False, help_text='Set while this run keeps other windows of its job waiting.', null=True, verbose_name='holds the job')),
                ('slot_start', models.DateTimeField(blank=True, editable=False, null=True, verbose_name='slot start')),
                ('slot_end', models.DateTimeField(blank=True, editable=False, null=True, verbose_name='slot end')),
                ('series', models.CharField(blank=True, editable=False, help_text='A digest of the schedule whose fire this is, the same under any name.', max_length=16, null=True, verbose_name='series')),
                ('claimed_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='claimed at')),
                ('expires_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='expires at')),
                ('started_at', models.DateTimeField(blank=True, help_text="When a worker started a task fire's run; empty while it waits in its queue.", null=True, verbose_name='started at')),
                ('finished_at', models.DateTimeField(blank=True, null=True, verbose_name='finished at')),
                ('output', models.TextField(blank=True, help_text='The end of what the run printed, stdout and stderr; empty if not captured.', null=True, verbose_name='output')),
                ('error', models.TextField(blank=True, verbose_name='error')),
                ('cancelled_by', models.CharField(blank=True, db_default='', default='', help_text='The OS user of the command, or the admin user, that cancelled the run.', max_length=150, verbose_name='cancelled by')),
                ('cancelled_at', models.DateTimeField(blank=True, null=True, verbose_name='cancelled at')),
                ('overlap', models.CharField(blank=True, db_default='', default='', help_text="buffer or replace: the fire waited for the job's run before it to end, as the job's overlap policy says; empty: it found none going.", max_length=16, verbose_name='overlap')),
            ],
            options={
                'verbose_name': 'job run',
                'verbose_name_plural': 'job runs',
                'get_latest_by': 'claimed_at',
                'indexes': [models.Index(fields=['status', 'expires_at'], name='jobclaims_status_expires_idx'), models.Index(fields=['claimed_at'], name='jobclaims_claimed_at_idx'), models.Index(fields=['job', 'slot_end'], name='jobclaims_job_slot_end_idx')],
                'constraints': [models.UniqueConstraint(fields=('job', 'window'), name='jobclaims_jobrun_job_window_uniq'), models.UniqueConstraint(fields=('job', 'holds_job'), name='jobclaims_jobrun_one_holder_uniq'), models.UniqueConstraint(fields=('series', 'window'), name='jobclaims_jobrun_series_window_uniq')],
            },
        ),
        migrations.CreateModel(
            name='ScheduledJob',
            fields=[
            ],
            options={
                'verbose_name': 'schedule',
                'verbose_name_plural': 'schedules',
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('jobclaims.jobrun',),
        ),
        migrations.CreateModel(
            name='JobSkip',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=200, verbose_name='job')),
                ('window', models.CharField(max_length=64, verbose_name='window')),
                ('owner', models.CharField(max_length=255, verbose_name='last skipped by')),
                ('reason', models.CharField(choices=[('held', 'another instance held the window'), ('succeeded', 'the window had already succeeded'), ('overlap', 'a run of another window held the job'), ('failed', "the fire failed, and its retries are the scheduler's"), ('slot-ran', 'another window covering the same time had run'), ('paused', 'an operator had paused the job')], max_length=16, verbose_name='reason')),
                ('count', models.PositiveIntegerField(default=1, verbose_name='times skipped')),
                ('skipped_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='last skipped at')),
            ],
            options={
                'verbose_name': 'job skip',
                'verbose_name_plural': 'job skips',
                'indexes': [models.Index(fields=['job', 'window', 'skipped_at'], name='jobclaims_skip_window_idx')],
                'constraints': [models.UniqueConstraint(fields=('job', 'window', 'reason'), name='jobclaims_skip_window_reason_uniq')],
            },
        ),
        migrations.CreateModel(
            name='JobPause',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=200, verbose_name='job')),
                ('paused_by', models.CharField(help_text='The OS user of the command, or the admin user, that paused the job.', max_length=150, verbose_name='paused by')),
                ('reason', models.TextField(blank=True, verbose_name='reason')),
                ('paused_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='paused at')),
                ('until', models.DateTimeField(blank=True, help_text='The pause ends by itself at this time; empty: until resumed.', null=True, verbose_name='until')),
                ('resumed_by', models.CharField(blank=True, max_length=150, verbose_name='resumed by')),
                ('resumed_at', models.DateTimeField(blank=True, null=True, verbose_name='resumed at')),
            ],
            options={
                'verbose_name': 'job pause',
                'verbose_name_plural': 'job pauses',
                'get_latest_by': 'paused_at',
                'indexes': [models.Index(fields=['job', 'resumed_at'], name='jobclaims_pause_job_idx')],
            },
        ),
        migrations.CreateModel(
            name='RetiredJob',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=200, verbose_name='job')),
                ('retired_by', models.CharField(help_text='The OS user or admin user who retired it.', max_length=150, verbose_name='retired by')),
                ('retired_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='retired at')),
                ('reason', models.TextField(blank=True, verbose_name='reason')),
            ],
            options={
                'verbose_name': 'retired job',
                'verbose_name_plural': 'retired jobs',
                'constraints': [models.UniqueConstraint(fields=('job',), name='jobclaims_retired_job_uniq')],
            },
        ),
        migrations.CreateModel(
            name='SchedulerSeen',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('host', models.CharField(max_length=255, verbose_name='host')),
                ('pid', models.PositiveIntegerField(verbose_name='process id')),
                ('fingerprint', models.CharField(help_text='A digest of the schedules the scheduler runs: equal on hosts that agree.', max_length=16, verbose_name='fingerprint')),
                ('schedules', models.JSONField(default=dict, help_text="Each job's schedule, by job name.", verbose_name='schedules')),
                ('started_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='started at')),
                ('last_seen_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='last seen at')),
                ('stopped_at', models.DateTimeField(blank=True, help_text='When it stopped cleanly: from then on it is no longer live.', null=True, verbose_name='stopped at')),
            ],
            options={
                'verbose_name': 'scheduler seen',
                'verbose_name_plural': 'schedulers seen',
                'indexes': [models.Index(fields=['last_seen_at'], name='jobclaims_seen_last_seen_idx')],
                'constraints': [models.UniqueConstraint(fields=('host', 'pid', 'started_at'), name='jobclaims_scheduler_seen_uniq')],
            },
        ),
        migrations.CreateModel(
            name='ScheduleVersion',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=200, verbose_name='job')),
                ('fingerprint', models.CharField(help_text='A digest of the schedule and the time zone it is read in.', max_length=16, verbose_name='fingerprint')),
                ('schedule', models.CharField(max_length=255, verbose_name='schedule')),
                ('since', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='in force since')),
            ],
            options={
                'verbose_name': 'schedule version',
                'verbose_name_plural': 'schedule versions',
                'constraints': [models.UniqueConstraint(fields=('job', 'fingerprint'), name='jobclaims_schedule_version_uniq')],
            },
        ),
        migrations.CreateModel(
            name='KnownCommand',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=200, verbose_name='job')),
                ('first_seen_at', models.DateTimeField(db_default=jobclaims.time.clock.DatabaseNow(), verbose_name='first seen at')),
            ],
            options={
                'verbose_name': 'known command',
                'verbose_name_plural': 'known commands',
                'constraints': [models.UniqueConstraint(fields=('job',), name='jobclaims_known_command_uniq')],
            },
        ),
        migrations.CreateModel(
            name='StoredSchedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text="Names its runs: COMMAND[NAME]. Keep it across edits: the runs of a new name are another job's.", max_length=100, unique=True, verbose_name='name')),
                ('command', models.CharField(blank=True, help_text='The JobCommand that runs at each fire, by its management command name; empty for a task.', max_length=100, verbose_name='command')),
                ('arguments', models.CharField(blank=True, help_text='Passed to the command at each fire, as in a shell: --region eu.', max_length=1000, verbose_name='arguments')),
                ('task', models.CharField(blank=True, help_text='Instead of a command: the Celery or Django task each fire enqueues, by its dotted path (billing.tasks.nightly_report).', max_length=200, verbose_name='task')),
                ('task_args', models.JSONField(blank=True, default=list, help_text='The task\'s positional arguments, a JSON list: ["eu", 3].', verbose_name="task's arguments")),
                ('task_kwargs', models.JSONField(blank=True, default=dict, help_text='The task\'s keyword arguments, a JSON object: {"region": "eu"}.', verbose_name="task's keyword arguments")),
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
        migrations.CreateModel(
            name='JobTag',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.CharField(max_length=200, verbose_name='job')),
                ('tag', models.CharField(max_length=101, verbose_name='tag')),
            ],
            options={
                'verbose_name': 'job tag',
                'verbose_name_plural': 'job tags',
                'constraints': [models.UniqueConstraint(fields=('job', 'tag'), name='jobclaims_job_tag_uniq')],
            },
        ),
    ]
