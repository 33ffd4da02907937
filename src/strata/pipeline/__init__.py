"""The flows, each a plan to read top to bottom, its stages called in order.

- `strata.pipeline.ingest`: discover -> parse -> store -> index -> (optional) features, run by a local executor
  (`ingest`) or a Ray executor (`strata.pipeline.ingest_ray.ingest_with_ray`) that share every step but the executor.
- `strata.pipeline.ask`: retrieve -> relate -> rerank -> read -> validate, one question at a time.
"""
