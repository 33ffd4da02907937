"""Training, kept out of the product stages: the cross-encoder reranker (`strata train-reranker`) and the ToC's LoRA
adapters (`strata train-toc`). It imports the stages; no stage imports it, only those two commands (lazily)."""
