"""The catalog in pgstac (PostgreSQL + PostGIS): loaded (:mod:`._pgstac_load`) and searched
(:mod:`._pgstac_api`)."""
