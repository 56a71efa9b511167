"""Real datasets: recipes that download, verify, extract and preprocess each benchmark's dataset.

A recipe (``minis/<benchmark>/dataset.yaml``) names the sources with their checksums, the manual
steps and the preparation; :mod:`mlrepro.datasets.steps` runs each step into a folder of ``data_root``
with a sha256 manifest, and records a receipt with cheap per-file stamps in the pipeline's outdir.
"""
