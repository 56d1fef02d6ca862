"""Credentials: S3 keys and providers, web-source auth, and their scrubbing."""
