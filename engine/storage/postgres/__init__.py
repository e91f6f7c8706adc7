"""The PostgreSQL backend, the optional extra: one log per schema through psycopg 3.

``storage`` (connections, reads, opening), ``writer`` (the head row's lock and the batch's
pipeline), ``listen`` (LISTEN wake-ups), ``dialect`` (SQLite's SQL run here), ``arrays`` (a
batch's columns as array literals), ``schema`` (migrations) and ``url`` (the address). Nothing
is imported here: ``url`` must load without psycopg (``engine.storage.parse_target``)."""
