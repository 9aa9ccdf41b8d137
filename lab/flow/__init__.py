"""The pipeline's stages as functions: prepare, index, candidates, sweep, gate, export, and the demo
that runs them end to end. `lab stage` (and DVC through it), `lab demo` and the notebooks call
these with the workspace they run in (an argument: nothing here installs one); they return what
they made and print nothing, so the shells only parse and print.

Modules: `stages` (the DVC pipeline's stages, with `params` their parameters from params.yaml and
`layout` the folders they read and write), `results` (what the stages make, as frozen dataclasses
the shells word), `evaluate` (`lab eval`'s path: presets or a candidate file, overrides merged in)
and `demo` (ingest, evaluate, sweep, gate, export on the embedded demo data, making the stages'
result types). Import them by name (`from lab.flow.stages import run_stage`): this package
imports nothing itself, so a shell that only builds its parser stays instant.
"""

STAGES = ("prepare", "index", "candidates", "sweep", "gate", "export")  # the DVC pipeline, in order
