"""Web sources (``https://``, ``http://``): ranged GETs through redirects with auth bound to
their hosts (:mod:`._http_client`, :mod:`._hops`), answers checked (:mod:`._content_range`), and
the readers the fetch paths and the identity check use (:mod:`._http_store`)."""
