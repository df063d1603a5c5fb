"""A family library without tuning, for tests: the template's fallback configs at ``n``
representatives spread over the family's flops (distinct tilings), the buckets routed to them
in turn, and the generic kernel."""
import tvm_ext.family as F


def fallback_library(fam, target, n_kernels, kind):
    buckets = F.make_buckets(fam)
    reps = F.spread(sorted({b.rep for b in buckets}, key=lambda s: fam.workload(s).flop),
                    n_kernels)
    t = F.family_template(fam, target)
    kernels = [F.LibKernel(t.name, r, {}, tuned=False) for r in reps]
    routes = [(b.bounds, i % len(kernels)) for i, b in enumerate(buckets)]
    return F.Library(fam, kind, kernels, routes, F.generic_kernel(fam, target))
