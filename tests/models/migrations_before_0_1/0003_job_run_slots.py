"""Record each claim's slot, the interval its window covers (jobclaims.slots).

A copy for tests/models/test_migrations.py. The original ended with a RunPython that
gave the claims made before it their slot by calling jobclaims.slots, live
code. The copy leaves it out: the test applies this chain to empty tables,
where it had no rows to fill, and a RunPython changes rows, not the schema.
"""

from django.db import migrations, models


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
    ]
