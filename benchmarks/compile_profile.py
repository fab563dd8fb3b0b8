"""Per-test XLA compile time of a pytest run, and which tests to mark ``xla_optimized``.

Most of the test jobs' time is XLA compiling.  ``tests/conftest.py`` compiles with XLA's cheapest
optimisation except in tests marked ``xla_optimized``, whose runs, not their compiles, dominate.
This file tells which tests those are, by measurement:

* as a pytest plugin it appends one JSON line per test to ``$COMPILE_LOG``: the test's wall time
  and, from ``jax.monitoring``, the seconds spent tracing, lowering and compiling (backend) and the
  number of backend compiles::

      PYTHONPATH=benchmarks COMPILE_LOG=/tmp/slow.jsonl BDTREE_TEST_CACHE=$(mktemp -d) \\
          BDTREE_TEST_XLA=default python -m pytest -p compile_profile -m slow -p no:cacheprovider

  (an empty cache, so every program compiles; ``BDTREE_TEST_XLA=default`` measures the optimised
  build, whose compile is what the cheap one saves);
* as a script it reads such a log and lists, per test function (parametrisations summed), its
  wall, compile and run seconds (run: wall less trace, lowering and compile) and the proposal:
  ``xla_optimized`` where run >= ``--ratio`` x compile (default 0.2), else the cheap build::

      python benchmarks/compile_profile.py /tmp/slow.jsonl [--ratio 0.2]

  The ratio comes from eight slow tests timed in both builds (2-core CPU, empty caches): the cheap
  build compiled 2.4-5.4x faster and ran 1.5-7.5x slower, so a test gains from it only where its
  run is a small part of its compile.  The ratio is a first guess; the measurement decides:
* given a second log of the same tests run with every test cheap (``BDTREE_TEST_XLA=cheap``, the
  marks ignored; same day, same machine, empty cache), ``--cheap`` proposes per function the build
  whose wall was shorter, and lists both walls::

      python benchmarks/compile_profile.py /tmp/optimised.jsonl --cheap /tmp/cheap.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

import pytest

_EVENTS = {"/jax/core/compile/backend_compile_duration": "compile",
           "/jax/core/compile/jaxpr_trace_duration": "trace",
           "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower"}
_totals = dict.fromkeys(("compile", "trace", "lower", "compiles"), 0.0)


def _listener(event, duration, **kwargs):
    name = _EVENTS.get(event)
    if name is not None:
        _totals[name] += duration
        if name == "compile":
            _totals["compiles"] += 1


def pytest_configure(config):
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_listener)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    for name in _totals:
        _totals[name] = 0.0
    start = time.perf_counter()
    yield
    record = dict(test=item.nodeid, wall=time.perf_counter() - start, **_totals)
    with open(os.environ["COMPILE_LOG"], "a") as f:
        f.write(json.dumps(record) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", help="the JSON lines the plugin wrote")
    parser.add_argument("--ratio", type=float, default=0.2, help="xla_optimized where run >= ratio x compile")
    parser.add_argument("--cheap", help="a log of the same tests with every test cheap (BDTREE_TEST_XLA=cheap): "
                        "choose the build by the shorter wall")
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in open(args.log)]
    by_function = _by_function(rows)
    wall = sum(r["wall"] for r in rows)
    compile_s, other_s = sum(r["compile"] for r in rows), sum(r["trace"] + r["lower"] for r in rows)
    print(f"{len(rows)} tests, {len(by_function)} functions: wall {wall:.0f} s, backend compile {compile_s:.0f} s, "
          f"trace + lowering {other_s:.0f} s")
    if args.cheap is not None:
        cheap = _by_function([json.loads(line) for line in open(args.cheap)])
        both = {name: (f["wall"], cheap[name]["wall"]) for name, f in by_function.items() if name in cheap}
        print(f"{len(both)} functions in both logs: optimised {sum(o for o, _ in both.values()):.0f} s, "
              f"cheap {sum(c for _, c in both.values()):.0f} s, the shorter of each "
              f"{sum(min(o, c) for o, c in both.values()):.0f} s")
        print("\n| test function | wall optimised s | wall cheap s | build |\n|---|---:|---:|---|")
        for name, (opt, chp) in sorted(both.items(), key=lambda kv: kv[1][1] - kv[1][0]):
            print(f"| {name} | {opt:.1f} | {chp:.1f} | {'xla_optimized' if opt < chp else 'cheap'} |")
        return
    print("\n| test function | wall s | compile s | run s | build |\n|---|---:|---:|---:|---|")
    for name, f in sorted(by_function.items(), key=lambda kv: -kv[1]["wall"]):
        run = max(f["wall"] - f["compile"] - f["other"], 0.0)
        build = "xla_optimized" if run >= args.ratio * f["compile"] else "cheap"
        print(f"| {name} | {f['wall']:.1f} | {f['compile']:.1f} | {run:.1f} | {build} |")


def _by_function(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per test function (its parametrisations summed): wall, backend compile and other (trace and
    lowering) seconds."""
    by_function = collections.defaultdict(lambda: dict(wall=0.0, compile=0.0, other=0.0))
    for r in rows:
        f = by_function[r["test"].split("[")[0]]
        f["wall"] += r["wall"]
        f["compile"] += r["compile"]
        f["other"] += r["trace"] + r["lower"]
    return by_function


if __name__ == "__main__":
    main()
