"""Research harnesses and benchmark-only tools, kept out of the product: the STAIR experiment (one job on a CPU or a
lent GPU), the synthetic scale corpus and the store comparison. They import the product; the product never imports
them."""
