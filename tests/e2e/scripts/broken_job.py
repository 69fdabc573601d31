"""A script with a bug that no restart fixes: every rank fails right away."""

raise RuntimeError("configuration file missing: /nonexistent/config.yaml")
