"""Every method through ``bd.sample`` on the default device with its default chain layout
(``vmap``-ped chains on a GPU), against ``chain_method="loop"``: does it run, do the two layouts
give the same tree topologies, and the hold-out accuracy on bcw; then a small BART regression.

    OUT=benchmarks/results python benchmarks/gpu_smoke.py        # ONLY=cgm,pg to run a subset

Writes ``gpu_smoke.json`` to ``$OUT``.  A smoke check for a GPU session, not a timing benchmark
(the seconds include compilation).
"""
import time, warnings, json, os
import numpy as np, jax
import bdtree_jax as bd
warnings.simplefilter("ignore")
X, y, Xt, yt = bd.datasets.load_split("bcw")
out = {"device": jax.devices()[0].device_kind}
run = dict(num_warmup=100, num_samples=100, num_chains=4, seed=0, progress=False)
ONLY = os.environ.get("ONLY", "").split(",")
for name, method, kw in [("cgm", bd.CGM(), {}), ("cgm+regrow tempered", bd.CGM(proposal="cgm+regrow"), dict(tempering=bd.Tempering(3))),
                         ("pg", bd.PG(), {}), ("wu", bd.WU(num_local_steps=5), {}), ("smc", bd.SMC(num_particles=200), {}),
                         ("pcfg", bd.PCFG(num_buckets=4), {}), ("hmc-df", bd.RJHMC(kind="df"), dict(num_warmup=10, num_samples=10))]:
    if ONLY != [""] and name not in ONLY:
        continue
    r = {**run, **{k: v for k, v in kw.items() if k.startswith("num_")}}
    extra = {k: v for k, v in kw.items() if not k.startswith("num_")}
    prior = bd.TreePrior(max_depth=3 if name in ("pcfg", "hmc-df") else 5)
    t0 = time.perf_counter()
    try:
        vec = bd.sample(X, y, method=method, prior=prior, **extra, **r)
        seq = bd.sample(X, y, method=method, prior=prior, chain_method="loop", **extra, **r)
        key = "draws" if name == "hmc-df" else "trees"
        a = vec.draws["is_split"] if key == "draws" else vec.trees.is_split
        b = seq.draws["is_split"] if key == "draws" else seq.trees.is_split
        acc = float((vec.predict(Xt) == yt).mean())
        out[name] = dict(ok=True, seconds=round(time.perf_counter() - t0, 1), same_topologies_vec_vs_seq=bool(np.array_equal(a, b)), test_accuracy=acc)
    except Exception as e:
        out[name] = dict(ok=False, error=repr(e)[:300])
    print(name, out[name], flush=True)
Xr, yr = bd.datasets.make_cgm(1000, seed=0)
t0 = time.perf_counter()
reg = bd.BARTRegressor(num_trees=50, num_warmup=100, num_samples=100, num_chains=2, seed=0, progress=False).fit(Xr, yr)
out["bart"] = dict(ok=True, seconds=round(time.perf_counter() - t0, 1), rmse=float(np.sqrt(np.mean((reg.predict(Xr) - yr) ** 2))))
print("bart", out["bart"])
with open(os.path.join(os.environ.get("OUT", "benchmarks/results"), "gpu_smoke.json"), "w") as fh:
    json.dump(out, fh, indent=1)
