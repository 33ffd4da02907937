"""Evaluation: retrieval on BEIR-format datasets (nDCG@10, recall, MRR with ir_measures), TREC runs and JSON results."""
