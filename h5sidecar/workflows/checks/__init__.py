"""Checks of written sidecars: summaries, comparisons with h5py and plain readers, CF and dimension checks."""
