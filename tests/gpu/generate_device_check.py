#!/usr/bin/env python3
"""`specula generate --device cuda` against `--device cpu` through the command line, on a GPU machine.

For every decoding method (ar, greedy, chain, block, tree with each sibling scheme) and two sampler settings,
the same seeds must give the same token lines on both devices (the draws share their Philox keys; see README,
"When do CPU and device draws differ?"), the metrics JSON must say which device verified, and the device run's
acceptance counters must equal the CPU's. Also runs the bundled transformer target and draft (results/models):
with --device cuda the target computes on the GPU, so beside the CPU comparison, at T = 0 every speculative method
must equal autoregressive decoding on the device (the README's promise for one device).
Exit 0 when everything agrees, 1 otherwise, 77 when no GPU is usable (the binary says so).

The transformer pairs need the bundled checkpoints and Debian's LibTorch (the binary loads it at run time). Where
either is missing they fail, unless --allow-no-transformer is given: then they are reported as skipped, by name,
and the last line says how many were skipped. A LibTorch module that is present but does not load (an undefined
symbol, say) always fails.

Usage: generate_device_check.py --binary build/specula [--device cuda] [--samples N] [--quick]
                                [--allow-no-transformer]
       (--quick: one sampler setting and no transformer, for the CTest run against cuda-host)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TARGET = "0.5 1.0 -0.3 0.2\n1.2 -0.4 0.3 0.0\n-0.2 0.8 0.9 -1.0\n0.1 0.1 1.5 -0.5\n"
DRAFT = "0.4 1.3 -0.1 0.2\n1.0 -0.2 0.3 0.3\n-0.5 0.8 1.2 -1.0\n0.3 0.0 1.1 -0.2\n"
METHODS = [
    "--method ar",
    "--method greedy --num-draft-tokens 3",
    "--method chain --num-draft-tokens 4",
    "--method block --num-draft-tokens 3",
    "--method chain --num-draft-tokens 4 --confidence-threshold 0.4",
    "--method tree --tree 2,2",
    "--method tree --tree 2,2,1 --tree-sampling without-replacement",
    "--method tree --tree 3,1 --tree-sampling topk",
    "--method tree --tree 16,15",
]
SAMPLERS = ["--temperature 0.9 --top-k 3", "--temperature 0.7 --repetition-penalty 1.3 --top-p 0.9 --stop-tokens 3"]


def run(binary, args):
    return subprocess.run([binary] + args, capture_output=True, text=True, timeout=600)


def torch_missing(stderr):
    """The binary's LibTorch module, or a library it needs, is not installed (not: present but broken)."""
    return "cannot load the LibTorch module" in stderr and "cannot open shared object file" in stderr


def skip(skips, label, why):
    skips.append(label)
    print(f"skip  {label}: {why}")


def generated(binary, args, device, label, failures, skips):
    """Runs the command; True when it exited 0, else records why (a skip where LibTorch is missing and `skips` is
    a list, a failure otherwise). No usable GPU ends the whole check with 77."""
    r = run(binary, args)
    if r.returncode == 0:
        return True
    if device != "cpu" and "no CUDA device" in r.stderr:
        print("skipped: " + r.stderr.strip())
        sys.exit(77)
    if skips is not None and torch_missing(r.stderr):
        skip(skips, label, "LibTorch is not installed here")
    else:
        failures.append(f"{label} --device {device}: exit {r.returncode}: {r.stderr.strip()}")
    return False


def compare(binary, device, common, label, failures, skips=None, same_logits=True, waits_a_step=None):
    """skips: a list to record the pair in when LibTorch is missing (None: that is a failure). same_logits: False
    where the model itself computes on the device (a transformer under --device cuda): its logits may differ from
    the CPU's in the last bits, so a differing line is reported, not failed (greedy_on_device checks that path).
    waits_a_step: the device run's device_waits / steps it must show (1: the draft's ids stayed on the device through
    the target's forward and verification)."""
    before = len(failures)
    common = ["generate"] + common
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        for dev in ("cpu", device):
            out, metrics = os.path.join(tmp, dev + ".txt"), os.path.join(tmp, dev + ".json")
            if not generated(binary, common + ["--device", dev, "--output", out, "--metrics-json", metrics], dev,
                             label, failures, skips):
                return
            outs[dev] = (open(out).read(), json.load(open(metrics)))
        (cpu_text, cpu_m), (dev_text, dev_m) = outs["cpu"], outs[device]
        if cpu_text != dev_text:
            lines = sum(a != b for a, b in zip(cpu_text.splitlines(), dev_text.splitlines()))
            message = f"{label}: {lines} of {len(cpu_text.splitlines())} lines differ"
            if same_logits:
                failures.append(message)
            else:
                print("note  " + message + " (the model's logits on the device differ in the last bits)")
        if dev_m.get("device") != device:
            failures.append(f"{label}: metrics say device {dev_m.get('device')!r}")
        if dev_m.get("growth_waits", 0) != 0:
            failures.append(f"{label}: {dev_m.get('growth_waits')} growth waits on {device}, not 0 (a step buffer the "
                            "run's reservation did not cover; BatchVerifier::reserve)")
        if dev_m.get("staging_waits") != 0:
            failures.append(f"{label}: {dev_m.get('staging_waits')} staging waits on {device}, not 0 (a staging buffer "
                            "written again while its upload might still run; kernels/kernel_stream.h)")
        steps, waits = dev_m.get("steps", 0), dev_m.get("device_waits")
        if waits_a_step is not None and steps and waits != steps * waits_a_step:
            failures.append(f"{label}: {waits} device waits in {steps} steps on {device}, not {waits_a_step} a step "
                            "(kernels/README.md, \"What a step waits for\")")
        for key in ("steps", "accepted_tokens", "proposed_tokens", "emitted_tokens") if same_logits else ():
            if key in cpu_m and cpu_m.get(key) != dev_m.get(key):
                failures.append(f"{label}: {key} {dev_m.get(key)} on {device}, {cpu_m.get(key)} on cpu")
        # The models' step graphs: on a GPU a transformer's steps replay captured graphs after each shape's first run.
        runs, replays = dev_m.get("step_graph_runs", 0), dev_m.get("step_graph_replays", 0)
        if device == "cuda" and runs > 0 and replays == 0:
            failures.append(f"{label}: none of {runs} step graph runs replayed a CUDA graph on {device} (no capture: "
                            "see the run's standard error)")
        # What the step buffers cost (each bounded before the first step), how often growing one drained the stream, and
        # the step graphs (a lockstep batch's counted for each of its sequences).
        graphs = (f", {replays} of {runs} step graph runs replayed, {dev_m.get('step_graphs_built', 0)} built, "
                  f"{dev_m.get('step_graphs_evicted', 0)} evicted" if runs else "")
        memory = (f" ({dev_m.get('device_buffer_bytes', 0) / 1024:.0f} KiB of step buffers, "
                  f"{dev_m.get('growth_waits', 0)} growth waits{graphs})")
    print(f"{'ok  ' if len(failures) == before else 'FAIL'}  {label}{memory}")


def for_method(args, method):
    """`args` with `method`; plain decoding takes no draft (generate refuses --draft with --method ar)."""
    if method.split()[:2] == ["--method", "ar"] and "--draft" in args:
        i = args.index("--draft")
        args = args[:i] + args[i + 2:]
    return args + method.split()


def greedy_on_device(binary, device, common, methods, label, failures, skips=None):
    """At T = 0 every speculative method's lines equal autoregressive decoding's on the same device (the target on
    the GPU computes in another summation order than on the CPU: equality holds within one device)."""
    before = len(failures)
    with tempfile.TemporaryDirectory() as tmp:
        texts = {}
        for method in ["--method ar"] + methods:
            out = os.path.join(tmp, f"{len(texts)}.txt")
            if not generated(binary, ["generate"] + for_method(common, method) + ["--device", device, "--output", out],
                             device, f"{label} {method}", failures, skips):
                return
            texts[method] = open(out).read()
        for method in methods:
            if texts[method] != texts["--method ar"]:
                failures.append(f"{label}: {method} at T = 0 differs from --method ar on {device} (or a near-tie "
                                "between 1-row and multi-row GEMMs flipped: verify/ALGORITHMS.md §1)")
    print(f"{'ok  ' if len(failures) == before else 'FAIL'}  {label}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--allow-no-transformer", action="store_true")
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    a = ap.parse_args()
    failures, skips = [], []
    with tempfile.TemporaryDirectory() as tmp:
        target, draft = os.path.join(tmp, "t.txt"), os.path.join(tmp, "d.txt")
        open(target, "w").write(TARGET)
        open(draft, "w").write(DRAFT)
        for sampler in SAMPLERS[-1:] if a.quick else SAMPLERS:
            for method in METHODS:
                settings = "--temperature 0 --repetition-penalty 1.3" if "greedy" in method else sampler
                common = for_method((f"--target bigram:{target} --draft bigram:{draft} --prompt-tokens 0,2 "
                                     f"--max-new-tokens 12 --num-samples {a.samples} --seed 11 {settings}").split(),
                                    method)
                compare(a.binary, a.device, common, f"bigram {method} {settings}", failures)
    models = os.path.join(a.source, "results", "models")
    allowed = skips if a.allow_no_transformer else None
    for method in ([] if a.quick else ["--method chain --num-draft-tokens 4", "--method tree --tree 2,2,1",
                                       "--method tree --tree 2,2,1 --repetition-penalty 1.3 --frequency-penalty 0.3"]):
        label = f"transformer {method}"
        if not os.path.exists(os.path.join(models, "target", "config.json")):
            if allowed is None:
                failures.append(f"{label}: no bundled checkpoints in {models}")
            else:
                skip(skips, label, f"no bundled checkpoints in {models}")
            continue
        common = (f"--target transformer:{models}/target --draft transformer:{models}/draft --prompt-tokens "
                  f"82,79,77,69,79,58,10 --max-new-tokens 24 --num-samples 8 --seed 5 --temperature 0.8 "
                  f"{method}").split()
        # Both models compute where the kernels run (on the GPU, or under cuda-host on the host): the draft's ids stay on
        # the device, one wait a step, penalised or not (a row's path is counted there).
        compare(a.binary, a.device, common, label, failures, allowed, same_logits=a.device != "cuda", waits_a_step=1)
    if not a.quick:
        # Siblings without replacement: the draft's depths are fed at the full shape and its ids stay on the device,
        # the nodes never drawn holes that verification leaves out (top-k 2 under four siblings: every root runs out,
        # its drawn nodes keyed as the smaller trees'): one wait a step. A chain that stops on the draft's doubt is drawn
        # fed and cut by its drafts' probabilities, gathered on the device while the ids stay there: two waits a step
        # (the probabilities, then verification). A moving K draws each step's chains at its longest K and cuts them, its
        # ids on the device: one wait a step, and the step graphs' shapes vary with the Ks.
        for method, waits in [("--method chain --num-draft-tokens 8 --num-draft-tokens-schedule heuristic", 1),
                              ("--method tree --tree 2,2,1 --tree-sampling without-replacement", 1),
                              ("--method tree --tree 4,2 --tree-sampling without-replacement --top-k 2", 1),
                              ("--method chain --num-draft-tokens 6 --confidence-threshold 0.4", 2)]:
            if os.path.exists(os.path.join(models, "target", "config.json")):
                common = (f"--target transformer:{models}/target --draft transformer:{models}/draft --prompt-tokens "
                          f"82,79,77,69,79,58,10 --max-new-tokens 24 --num-samples 8 --seed 5 --temperature 0.8 "
                          f"{method}").split()
                compare(a.binary, a.device, common, f"transformer {method}", failures, allowed,
                        same_logits=a.device != "cuda", waits_a_step=waits)
            elif allowed is None:
                failures.append(f"transformer {method}: no bundled checkpoints in {models}")
            else:
                skip(skips, f"transformer {method}", f"no bundled checkpoints in {models}")
    if not a.quick and os.path.exists(os.path.join(models, "target", "config.json")):
        common = (f"--target transformer:{models}/target --draft transformer:{models}/draft --prompt-tokens "
                  f"82,79,77,69,79,58,10 --max-new-tokens 32 --num-samples 2 --temperature 0").split()
        greedy_on_device(a.binary, a.device, common,
                         ["--method greedy --num-draft-tokens 4", "--method chain --num-draft-tokens 4",
                          "--method block --num-draft-tokens 4", "--method tree --tree 2,2,1",
                          "--method chain --num-draft-tokens 6 --confidence-threshold 0.4"],
                         "transformer greedy equality on the device", failures, allowed)
        # Penalised: the draft's depths and the target's rows count their paths' ids on the device (pending counts).
        greedy_on_device(a.binary, a.device, common + "--repetition-penalty 1.3 --frequency-penalty 0.3".split(),
                         ["--method chain --num-draft-tokens 4", "--method tree --tree 2,2,1"],
                         "penalised transformer greedy equality on the device", failures, allowed)
    for f in failures:
        print("FAIL " + f)
    if skips:
        print(f"skipped {len(skips)} transformer pair(s): " + "; ".join(skips))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
