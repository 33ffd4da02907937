"""First-stage retrieval: hybrid BM25 + dense search over chunks, rolled up to papers."""
