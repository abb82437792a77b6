"""Running a load test: the orchestrator, its child processes, scraping and progress."""
