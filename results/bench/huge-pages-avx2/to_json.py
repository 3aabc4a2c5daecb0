"""kernel_ab.txt and forward_ab.txt as JSON (kernel_ab.json, forward_ab.json): each pass with the machine it ran
on, as its header lines recorded it (time, CPU, load before and after, THP mode, git revision), and each
measurement's medians and quartiles. Both files came from the same VM in the same hour; the CPU flags (avx2
f16c fma, no avx512f) are recorded in kernel_ab.txt's headers, and every kernel_ab line names the kernel the
dispatcher chose (avx2), the only SIMD kernel that CPU offers. Run: python3 to_json.py (from this folder)."""
import json
import re
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
NUM = r"([0-9.]+)"


def passes(path):
    """Splits a file into passes: (header line, [result lines], load-after line or None)."""
    out, current = [], None
    for line in path.read_text().splitlines():
        if line.startswith("# load after"):
            current[2] = line
        elif line.startswith("#"):
            current = [line, [], None]
            out.append(current)
        elif line.strip():
            current[1].append(line)
    return out


def machine(header, after, flags):
    m = {"cpu_model": re.search(r"model name\s*:\s*([^;]+)", header).group(1).strip(),
         "cpu_flags": flags, "cpu_avx2": "avx2" in flags, "cpu_avx512f": "avx512f" in flags,
         "transparent_hugepage": re.search(r"THP ([^;]+)", header).group(1).strip(),
         "load_average_before": " ".join(re.search(r"load ([0-9. ]+)", header).group(1).split()[:3]),
         "load_average_after": " ".join(after.split()[3:6]) if after else None,
         "threads": 1, "time_utc": header[2:].split(";")[0]}
    git = re.search(r"git (\w+)", header)
    if git:
        m["git_revision"] = git.group(1)
    return m


flags = sorted(set(re.search(r"flags: ([^;]+);", (here / "kernel_ab.txt").read_text()).group(1).split()))

kernel = []
for header, lines, after in passes(here / "kernel_ab.txt"):
    results = []
    for line in lines:
        g = re.match(r"(\w+)\s+rows\s+(\d+): " + NUM + r" MB, huge pages granted " + NUM + r" MB \(advised (\d)\); huge "
                     + NUM + " us, small " + NUM + r" us; huge/small median " + NUM + r" \[q25 " + NUM + ", q75 "
                     + NUM + r"\], (\d+) rounds, kernel (\w+)", line).groups()
        results.append({"dtype": g[0], "rows": int(g[1]), "matrix_mb": float(g[2]), "granted_mb": float(g[3]),
                        "advised": g[4] == "1", "median_huge_us": float(g[5]), "median_small_us": float(g[6]),
                        "ratio_huge_over_small_median": float(g[7]), "ratio_q25": float(g[8]),
                        "ratio_q75": float(g[9]), "rounds": int(g[10]), "kernel_isa": g[11]})
    kernel.append({"machine": machine(header, after, flags), "results": results})

forward = []
for header, lines, after in passes(here / "forward_ab.txt"):
    results, current = [], None
    for line in lines:
        if not line.startswith(" "):
            g = re.match(r"(\S+) (\w+): (\d+) MB moved, huge pages granted " + NUM + " MB after A, " + NUM
                         + r" MB after B; (\d+) rounds", line).groups()
            current = {"model": g[0], "dtype": g[1], "moved_mb": int(g[2]), "granted_mb_after_huge_copy": float(g[3]),
                       "granted_mb_after_small_copy": float(g[4]), "rounds": int(g[5]), "cases": []}
            results.append(current)
        else:
            g = re.match(r"\s+(.+?): huge " + NUM + " us, small " + NUM + r" us; huge/small median " + NUM
                         + r" \[q25 " + NUM + ", q75 " + NUM + r"\]", line).groups()
            current["cases"].append({"case": g[0], "median_huge_us": float(g[1]), "median_small_us": float(g[2]),
                                     "ratio_huge_over_small_median": float(g[3]), "ratio_q25": float(g[4]),
                                     "ratio_q75": float(g[5])})
    forward.append({"machine": machine(header, after, flags), "kernel_isa": "avx2", "results": results})

for name, passes_, source, what in (
        ("kernel_ab.json", kernel, "kernel_ab.cpp", "the few-row kernel over the 27M target's packed matrices"),
        ("forward_ab.json", forward, "forward_ab.cpp", "whole forwards of two copies of the 27M target in one process")):
    doc = {"benchmark": "huge pages against 4 KB pages, in-process ABBA per round", "what": what, "source": source,
           "transcribed_from": name.replace(".json", ".txt"), "passes": passes_}
    (here / name).write_text(json.dumps(doc, indent=1) + "\n")
    print("wrote", here / name, file=sys.stderr)
