"""JSON sidecars: kerchunk JSON v1 references, written and read whole or lazily.

Imports nothing here: the modules import each other and the package's root modules directly,
so importing one of them never loads the others first.
"""
