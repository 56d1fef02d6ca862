"""The datacube: many granules' sidecars combined along a dimension (``build_cube``), and appends."""
