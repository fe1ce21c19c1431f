#!/usr/bin/env python3
"""A stand-in for train_mlp in zero_largest_model.py's test: it "trains" a model of --layers when
its parameters fit the limit of the placement its flags ask for (1B in memory, 2B with the
optimizer states on NVMe, 3B with the parameters there too), and otherwise fails as an allocation
would."""
import sys

args = sys.argv[1:]
layers = [int(n) for n in args[args.index("--layers") + 1].split(",")]
params = sum(a * b + b for a, b in zip(layers, layers[1:]))
limit = 3e9 if "--nvme-params" in args else 2e9 if "--nvme" in args else 1e9
if params > limit:
    sys.exit(f"zero: out of memory: {params} parameters, the fake machine holds {limit:.0f}")
