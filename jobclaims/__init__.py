"""Make a scheduled Django job safe to run twice."""
