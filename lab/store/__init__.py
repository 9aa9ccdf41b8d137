"""The Parquet-backed (Delta Lake) store: tables, versions, records, file ingest."""
