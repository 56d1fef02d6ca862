"""Datacube references: many granules' references concatenated, their members as columns.

Imports nothing here: the modules import each other and the package's root modules directly,
so importing one of them never loads the others first.
"""
