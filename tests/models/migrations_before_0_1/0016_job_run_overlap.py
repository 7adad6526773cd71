"""Why a fire started late: the overlap policy that held it back for the run
before it. A column with a database default: the claim's INSERT leaves it
out, and no row is rewritten."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0015_stored_schedules'),
    ]

    operations = [
        migrations.AddField(
            model_name='jobrun',
            name='overlap',
            field=models.CharField(blank=True, db_default='', default='', help_text="buffer or replace: the fire waited for the job's run before it to end, as the job's overlap policy says; empty: it found none going.", max_length=16, verbose_name='overlap'),
        ),
    ]
