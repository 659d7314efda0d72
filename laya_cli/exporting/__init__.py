"""``laya export``: per-sample statistics (``profiles``) and the job that writes the export folder (``run``)."""
