"""The tags a pause of many jobs holds by: a table of its own, read by every
claim beside the pauses."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('jobclaims', '0016_job_run_overlap'),
    ]

    operations = [
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
