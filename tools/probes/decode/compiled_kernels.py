"""``compiled-kernels``: the compiled kernel paths for a decoding step's largest products: ``torch.compile``
(inductor) of one ``nn.Linear`` against eager float32 and bfloat16, on this host.

The two output projections (the default model's 49152 x 576, gemma3-270m's 262144 x 640) are far larger than the
CPU's caches, as every weight of a decoding step is in effect (the step reads them all once): they are where a
decoding step spends its time. Each variant multiplies one token ``x (1 x K)`` by the weight:

- ``float32``, ``bf16``: eager ``nn.Linear`` (torch's default dispatch: oneDNN where it uses it);
- ``float32_compiled``, ``bf16_compiled``: ``torch.compile`` of the same module with inductor's freezing on (the
  weight a constant, which lets inductor prepack it for oneDNN where the CPU allows);
- ``float32_autotune``: ``mode="max-autotune-no-cudagraphs"``, where inductor may pick its own C++ GEMM template;
- ``float32_autotune_unfrozen``: the same with freezing off (the weight an input, as it would be for a function
  shared by every layer of one shape);
- ``float32_cpp_template``: frozen, ``max-autotune`` with inductor's C++ GEMM template as the only choice
  (``max_autotune_gemm_backends="CPP"``), where the autotuning would otherwise pick between it and MKL.

A variant that cannot compile here is recorded with its error instead of times. Each compiled variant runs in a
process of its own (a second compilation in one process would reset the first, whose next call would then compile
again under other settings), beside eager float32 and bfloat16: in turn within a round (after its first, compiling,
call), ``--rounds`` rounds; a variant's time in a round is the median of ``--calls`` calls and its ratio to float32
is taken within the round, so a busy machine slows them alike. The eager columns are the first process's.

Usage::

    .venv/bin/python -m tools.probes.decode compiled-kernels --threads 1 --rounds 5 \\
        --out docs/results/compiled_probe.json
"""

from __future__ import annotations

from tools.probes.decode import common, kernels

SHAPES = ((49152, 576), (262144, 640))  # (rows, columns): the default model's and gemma3-270m's output projections
EAGER = ("float32", "bf16")
# each compiled variant: (the eager variant it compiles, torch.compile's options, inductor's settings)
AUTOTUNE = {"mode": "max-autotune-no-cudagraphs"}
COMPILED = {"float32_compiled": ("float32", {}, {"freezing": True}),
            "bf16_compiled": ("bf16", {}, {"freezing": True}),
            "float32_autotune": ("float32", AUTOTUNE, {"freezing": True}),
            "float32_autotune_unfrozen": ("float32", AUTOTUNE, {"freezing": False}),
            "float32_cpp_template": ("float32", AUTOTUNE, {"freezing": True, "max_autotune_gemm_backends": "CPP"})}
VARIANTS = (*EAGER, *COMPILED)
arguments = kernels.arguments  # the options of every measurement of products


def make_calls(rows: int, k: int, variants: tuple[str, ...] = VARIANTS) -> tuple[dict, dict[str, str]]:
    """(a zero-argument function per variant of ``variants`` that compiled, {variant: error} for those that did
    not)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, k, generator=generator)
    layer = torch.nn.Linear(k, rows, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(rows, k, generator=generator) * 0.02)
    layer16 = torch.nn.Linear(k, rows, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        layer16.weight.copy_(layer.weight)
    x16 = x.to(torch.bfloat16)
    inputs = {"float32": (layer, x), "bf16": (layer16, x16)}
    calls, failed = {}, {}
    for name in variants:
        if name in inputs:
            module, argument = inputs[name]
            calls[name] = _call(module, argument)
            continue
        base, options, settings = COMPILED[name]
        module, argument = inputs[base]
        try:
            # no cache: each variant autotunes afresh (a cached choice for the shape would carry over between them)
            with torch._inductor.config.patch(force_disable_caches=True, **settings):
                function = torch.compile(module.eval(), **options)
                with torch.no_grad():
                    function(argument)  # compiles
            calls[name] = _call(function, argument)
        except Exception as error:  # a path this host cannot compile is a finding: recorded
            failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            print(f"{name} {rows}x{k}: {failed[name]}", flush=True)
    return calls, failed


def _call(function, argument):
    import torch

    def call():
        with torch.no_grad():
            return function(argument)
    return call


def measure_one(rows: int, k: int, variant: str, rounds: int, calls: int) -> dict:
    """In this process: the eager variants and one compiled ``variant`` (the only compilation in the process, so no
    compiled function is reset or recompiled under another's settings), timed in turn over ``rounds``."""
    functions, failed = make_calls(rows, k, (*EAGER, variant))
    summary = kernels.probe(f"1x{k} @ {rows}x{k}.T, {variant}", functions, rounds, calls)
    return {"summary": summary, "failed": failed}


def child(argv: list[str]) -> None:
    """One compiled variant beside the eager ones, in this process: ROWS K VARIANT ROUNDS CALLS THREADS."""
    rows, k, variant, rounds, calls, threads = argv
    import torch

    torch.set_num_threads(int(threads))
    common.result(measure_one(int(rows), int(k), variant, int(rounds), int(calls)))


def run(args) -> None:
    started = common.start(args)
    results, failures = {}, {}
    for rows, k in SHAPES:
        label = f"1x{k} @ {rows}x{k}.T"
        results[label], failures[label] = {}, {}
        for variant in COMPILED:  # each compiled variant in a fresh process, with the eager ones
            measured = common.in_fresh_process("compiled-kernels", rows, k, variant, args.rounds, args.calls,
                                               args.threads)
            for name, row in measured["summary"].items():
                if name not in EAGER or name not in results[label]:  # the eager rows of the first process
                    results[label][name] = row
            failures[label].update(measured["failed"])
            print(f"{label} {variant}: " + ", ".join(f"{name} x{row['speedup_vs_float32_median']:.2f}"
                                                    for name, row in measured["summary"].items()), flush=True)
    common.write(args, started, "compiled_probe", kernels=True, decode=results, failed=failures)

