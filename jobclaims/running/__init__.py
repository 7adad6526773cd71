"""A run under its claim, whoever started it: it starts on a lease it knows
is held (``holding``), renews it (``heartbeat``), stops on a signal
(``stopping``), a timeout (``timeouts``) or a cancel (``cancels``), and what
becomes of a run that did not succeed (``attempts``); ``children``: what a
process jobclaims starts takes up from its parent. Imports the models and
the layers below."""
