"""STAC API item search over the item database: the API core (:mod:`._static_api`), its
parameters (:mod:`._params`) and their SQL (:mod:`._item_query`)."""
