"""jobapi: JobService for backends and AdminService for operators."""
