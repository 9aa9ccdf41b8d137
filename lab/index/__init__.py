"""Indexes over a namespace's chunks: vector (hnswlib), lexical (bm25s), and their manager."""
