"""Icechunk repositories: references written as virtual chunks, opened authorized, appended."""
