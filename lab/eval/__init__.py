"""Evaluation: dataset loaders (LoCoMo, BEIR, goldens), metrics and reports."""
