"""What operators do to a job: pause and resume it (``pauses``), retire it
(``retiring``), run it now or over a range of windows (``backfills``), prune
its history (``pruning``). Imports jobs and the layers below."""
