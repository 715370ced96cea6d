"""The compiled kernel paths for a decoding step's largest products: ``torch.compile`` (inductor) of one ``nn.Linear``
against eager float32 and bfloat16, on this host.

The two output projections (the default model's 49152 x 576, gemma3-270m's 262144 x 640) are far larger than the
CPU's caches, as every weight of a decoding step is in effect (the step reads them all once): they are where a
decoding step spends its time. Each variant multiplies one token ``x (1 x K)`` by the weight:

- ``float32``, ``bf16``: eager ``nn.Linear`` (torch's default dispatch: oneDNN where it uses it);
- ``float32_compiled``, ``bf16_compiled``: ``torch.compile`` of the same module with inductor's freezing on (the
  weight a constant, which lets inductor prepack it for oneDNN where the CPU allows);
- ``float32_autotune``: ``mode="max-autotune-no-cudagraphs"``, where inductor may pick its own C++ GEMM template.

A variant that cannot compile here is recorded with its error instead of times. Every variant runs in turn within a
round (after its first, compiling, call), ``--rounds`` rounds; a variant's time in a round is the median of
``--calls`` calls and its ratio to float32 is taken within the round, so a busy machine slows them alike.

Usage::

    .venv/bin/python -m tools.compiled_probe --threads 1 --rounds 5 --out docs/results/compiled_probe.json
"""

from __future__ import annotations

from tools.kernel_probe import probe, start_probe, write_probe

SHAPES = ((49152, 576), (262144, 640))  # (rows, columns): the default model's and gemma3-270m's output projections
VARIANTS = ("float32", "bf16", "float32_compiled", "bf16_compiled", "float32_autotune")


def make_calls(rows: int, k: int) -> tuple[dict, dict[str, str]]:
    """(a zero-argument function per variant that compiled, {variant: error} for those that did not)."""
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
    compiled = {"float32_compiled": ("float32", {}), "bf16_compiled": ("bf16", {}),
                "float32_autotune": ("float32", {"mode": "max-autotune-no-cudagraphs"})}
    calls, failed = {}, {}
    for name in VARIANTS:
        if name in inputs:
            module, argument = inputs[name]
            calls[name] = _call(module, argument)
            continue
        base, options = compiled[name]
        module, argument = inputs[base]
        torch._dynamo.reset()
        try:
            with torch._inductor.config.patch(freezing=True):
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


def main() -> None:
    args, start = start_probe(__doc__.split("\n")[0])
    results, failures = {}, {}
    for rows, k in SHAPES:
        label = f"1x{k} @ {rows}x{k}.T"
        calls, failed = make_calls(rows, k)
        results[label] = probe(label, calls, args.rounds, args.calls)
        failures[label] = failed
    write_probe(args, start, "compiled_probe", decode=results, failed=failures)


if __name__ == "__main__":
    main()
