"""What operators read: each job's health (``health``, from the facts
``health_reads`` reads in a few queries) and each schedule's overview
(``overview``). Imports scheduling and the layers below."""
