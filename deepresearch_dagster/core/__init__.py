"""Plain-Python research core: callable and testable without Dagster."""
