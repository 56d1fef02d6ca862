"""Parquet sidecars: kerchunk's Parquet layout plus our manifests and members files, read lazily.

Imports nothing here: the modules import each other and the package's root modules directly,
so importing one of them never loads the others first.
"""
