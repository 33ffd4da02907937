"""Fault-injection harnesses shared by the reliability tests and benchmarks/reliability.py (which runs them at full
size): crash trials on ingest, hostile parser inputs, a misbehaving OpenAI-compatible server."""
