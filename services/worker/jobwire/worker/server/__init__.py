"""WorkerService: how the fleet claims, reports on and finishes jobs."""
