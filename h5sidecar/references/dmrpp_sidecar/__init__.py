"""DMR++ documents written from references (what NASA's ``build_dmrpp`` writes beside a
granule): :func:`~._dmrpp_write.write_dmrpp`.  Reading DMR++ is the indexer's
(:mod:`h5sidecar.indexer.dmrpp`): a document is a source of references, not a sidecar format
h5sidecar's readers open."""
