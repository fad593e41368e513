"""Several dispatcher processes on one host (``dispatcher.processes``, issue #41 deliverable 4)."""
