"""Where a source lives and what reads it: the URL parser (:mod:`._urls`), the obstore stores
per URL and options (:mod:`._store_cache`), what a failed store request means
(:mod:`._store_errors`), and the byte-range readers over stores and local files
(:mod:`._backends`)."""
