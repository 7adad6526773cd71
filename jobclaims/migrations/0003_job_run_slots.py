"""Record each claim's slot, the interval its window covers (jobclaims.slots).

Existing claims get theirs from the schedule and window they recorded, so
that a deploy that respells a window, or drops one, does not run again a slot
that ran before the upgrade. A claim whose schedule names nothing gets none.
"""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from jobclaims import slots


def record_slots(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    runs = apps.get_model("jobclaims", "JobRun").objects.using(schema_editor.connection.alias)
    for run in runs.exclude(schedule="").filter(slot_end=None).iterator():
        found = slots.bounds(run.schedule, run.window)
        if found is not None:
            runs.filter(pk=run.pk).update(slot_start=found[0], slot_end=found[1])


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0002_retries'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='slot_end',
            field=models.DateTimeField(blank=True, editable=False, null=True, verbose_name='slot end'),
        ),
        migrations.AddField(
            model_name='jobrun',
            name='slot_start',
            field=models.DateTimeField(blank=True, editable=False, null=True, verbose_name='slot start'),
        ),
        migrations.AlterField(
            model_name='jobskip',
            name='reason',
            field=models.CharField(choices=[('held', 'another instance held the window'), ('succeeded', 'the window had already succeeded'), ('overlap', 'a run of another window held the job'), ('failed', "the fire failed, and its retries are the scheduler's"), ('slot-ran', 'another window covering the same time had run')], max_length=16, verbose_name='reason'),
        ),
        migrations.AddIndex(
            model_name='jobrun',
            index=models.Index(fields=['job', 'slot_end'], name='jobclaims_job_slot_end_idx'),
        ),
        migrations.RunPython(record_slots, migrations.RunPython.noop, elidable=True),
    ]
