"""The scheduler every host may run: its loop (``scheduler``), how it starts
a won fire's process (``launch``), and what schedulers record: themselves
seen alive (``seen``) and when each schedule came into force
(``schedule_versions``). Imports controls, jobs and the layers below."""
