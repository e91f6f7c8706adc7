"""The SQLite backend: one WAL file through APSW (``storage``), its writer (``writer``), the
file's guards (``files``), the WAL's checkpoint thread (``checkpoint``) and the schema's
migrations (``schema``). The default backend and the reference for the others."""
