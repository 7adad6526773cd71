"""Time: the database's clock, wall times, cron expressions, windows, and
the slots they cut a job's time into, with their keys. The bottom layer:
it imports nothing else of jobclaims."""
