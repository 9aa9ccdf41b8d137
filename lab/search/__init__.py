"""Multi-signal search: candidate generation, fusion, explanations and presets."""
