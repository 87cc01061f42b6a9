"""gRPC plumbing shared by both services: config, server bootstrap, interceptors, conversion."""
