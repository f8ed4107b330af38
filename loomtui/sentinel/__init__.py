"""The operator's scheduled jobs: run-job, log scanning, the queue, claims and nudges."""
