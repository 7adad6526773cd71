"""What the tests share: helpers, factories, the Celery fleet, the routers."""
