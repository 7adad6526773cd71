"""When a scheduler stopped cleanly: from then on it is no longer live.

Nullable, with no default: adding it rewrites no row, and a row written
before it (NULL) is live until SCHEDULER_GRACE, as every row was.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0013_jobrun_output'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedulerseen',
            name='stopped_at',
            field=models.DateTimeField(blank=True, help_text='When it stopped cleanly: from then on it is no longer live.', null=True, verbose_name='stopped at'),
        ),
    ]
