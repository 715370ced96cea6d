"""The decode probe: one-off measurements of the decoding step and the kernels behind it, each a subcommand (a module
of this package with ``arguments(parser)``, ``run(args)`` and, where it measures in fresh processes, ``child(argv)``),
run as ``python -m tools.probes.decode SUBCOMMAND``. Their results are under ``docs/results/`` and their tables and
facts beside them here; the design notes under ``docs/decisions/`` say what they decided."""

SUBCOMMANDS = {  # subcommand: module, in the order the help lists them
    "kernels": "kernels",
    "compiled-kernels": "compiled_kernels",
    "step-profile": "step_profile",
    "step-variants": "step_variants",
    "compiled-step": "compiled_step",
    "speed": "speed",
    "weight-dtypes": "weight_dtypes",
    "lm-head": "lm_head",
}
