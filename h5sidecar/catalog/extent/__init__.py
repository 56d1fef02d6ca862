"""What a granule covers: its locating variables found from the sidecar (:mod:`._probe`), read
into a footprint and time range (:mod:`._granule_extent`), with the geometry
(:mod:`._geometry`), time (:mod:`._time_range`) and bounding-box union (:mod:`._bbox_union`)
helpers."""
