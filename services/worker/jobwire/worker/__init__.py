"""jobwire worker distribution: the WorkerService (`server`, extra [server]) and the fleet runtime (`sdk`)."""
