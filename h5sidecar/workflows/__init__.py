"""h5sidecar.workflows."""
