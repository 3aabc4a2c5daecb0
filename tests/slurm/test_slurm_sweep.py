#!/usr/bin/env python3
"""experiments/slurm/*.sbatch on a real one-node Slurm cluster (CTest `slurm`).

Starts munged, slurmctld and slurmd on localhost from a generated slurm.conf in a temporary folder, runs
experiments/table-sweep.ini (more repetitions, so a shard runs a few seconds) as a 2-task array through
sweep.sbatch, preempts task 2 mid-run (`scontrol requeue`: SIGTERM, its folder `interrupted (SIGTERM)`; run
again, the task resumes that folder), merges with merge.sbatch as a dependent job, and compares the merge with an
unsharded `specula run` of the same sweep: every acceptance column of summary.csv and every record's tokens.
The jobs run in a work folder of the temporary folder (its results/; `experiments` links to the source's),
so nothing is written into the repository. Only the daemons and jobs this test started are stopped.

Exit 77 (CTest: skipped) where it cannot run: not root (slurmd starts jobs as their user), Slurm or munge
missing (setup.sh installs slurm-wlm and munge), no specula binary.
  test_slurm_sweep.py [--binary build/specula] [--source .] [--keep]
"""
import argparse, csv, json, os, shutil, signal, socket, subprocess, sys, tempfile, time
from pathlib import Path

SKIP = 77
REPETITIONS = 30  # table-sweep's 3 give 756 records in ~1 s; 30 make each of 2 shards run a few seconds
# summary.csv columns that must equal the unsharded run's: the setting, acceptance and token counts. The
# timing columns (rates, speedups, c, costs, load, drift) differ between any two runs. A column in neither
# list fails the test, so a new summary column is compared or knowingly left out.
ACCEPTANCE = ["lossy", "prompts", "draft_positions", "acceptance_rate", "alpha", "expected_acceptance", "tau",
              "predicted_tau", "per_position_acceptance", "accepted_length_histogram", "greedy_lossless",
              "q_zero_errors", "pairs", "profile_verify_cost", "profile_draft_source"]
TIMING = ["tokens_per_s", "baseline_tokens_per_s", "speedup", "speedup_ci_low", "speedup_ci_high", "c",
          "predicted_speedup", "measured_over_predicted", "decode_tokens_per_s", "baseline_decode_tokens_per_s",
          "decode_speedup", "decode_speedup_ci_low", "decode_speedup_ci_high", "decode_over_predicted",
          "verify_cost", "cost_model_speedup", "decode_over_cost_model", "pair_load_average", "pair_drift",
          "profile_draft_cost", "profile_speedup"]
TOOLS = ["munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo"]


class Failure(Exception):
    pass


def skip(why):
    print(f"slurm: skipped: {why}")
    sys.exit(SKIP)


def wait_for(what, predicate, timeout, interval=0.1):
    """Polls predicate() until it returns something true; fails naming `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise Failure(f"timed out after {timeout} s waiting for {what}")


def processes(conf):
    """The processes other than this one whose environment names slurm.conf `conf`: every process started for
    the test's cluster (daemons, job steps, jobs) has it."""
    marker, found = f"SLURM_CONF={conf}".encode() + b"\0", set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(pid) != os.getpid() and marker in Path(f"/proc/{pid}/environ").read_bytes():
                found.add(int(pid))
        except OSError:
            pass
    return found


def guard(root, keep):
    """Run beside the test (--guard): when the test ends, however it ends (a CTest timeout kills it outright),
    stops whatever its cluster left running and removes its temporary folder."""
    sys.stdin.read()  # EOF: the test process is gone
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in processes(root / "slurm.conf"):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        try:
            wait_for("the cluster's processes to end", lambda: not processes(root / "slurm.conf"), 5)
            break
        except Failure:
            pass
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """munged + slurmctld + slurmd in `root`, in the foreground so their process ids are known exactly."""

    def __init__(self, root, env):
        self.root, self.env, self.daemons, self.jobs = root, env, [], []
        self.conf = root / "slurm.conf"

    def start(self):
        for d in ("munge", "state", "spool", "log"):
            (self.root / d).mkdir()
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = self.root / "munge" / "socket"
        self._daemon("munged", ["munged", "-F", f"--key-file={key}", f"--socket={sock}",
                                f"--pid-file={self.root}/munge/munged.pid", f"--log-file={self.root}/log/munged.log",
                                f"--seed-file={self.root}/munge/seed"])
        wait_for("munged's socket", sock.exists, 10)
        # The node as slurmd sees it (name, CPUs, sockets, cores), with little memory: the jobs ask for 100M.
        node = self.run("slurmd", "-C").splitlines()[0].split()
        host = node[0].split("=")[1]
        node = " ".join(w for w in node if not w.startswith("RealMemory=")) + " RealMemory=1000"
        r = self.root
        # Own ports, cluster name, spool and state: a system Slurm on this machine is not touched.
        self.conf.write_text(f"""ClusterName=specula-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobRequeue=1
{node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
        self._daemon("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._daemon("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
        wait_for("the node to be idle (sinfo)", lambda: self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
                 .strip() == "idle", 30, 0.3)

    def _daemon(self, name, argv):
        log = open(self.root / "log" / f"{name}.out", "wb")
        proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.daemons.append((name, proc))
        time.sleep(0.2)
        if proc.poll() is not None:
            raise Failure(f"{name} exited at once ({proc.returncode}): see {log.name}")

    def run(self, *argv, check=True, cwd=None):
        p = subprocess.run(argv, env=self.env, cwd=cwd, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise Failure(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def sbatch(self, *argv, cwd):
        job = self.run("sbatch", "--parsable", *argv, cwd=cwd).strip().split(";")[0]
        self.jobs.append(job)
        return job

    def state(self, job):
        """JobState of a job or array task ("" when Slurm no longer knows it)."""
        out = self.run("scontrol", "show", "job", job, check=False)
        return next((w.split("=")[1] for w in out.split() if w.startswith("JobState=")), "")

    def stop(self):
        """Cancels this test's jobs, lets their job steps end, stops its daemons newest first, then kills what is
        left of its own (see processes())."""
        if self.jobs and any(p.poll() is None for n, p in self.daemons if n == "slurmctld"):
            self.run("scancel", *self.jobs, check=False)
            try:
                wait_for("the jobs to end", lambda: not self.run("squeue", "-h", check=False).strip(), 40, 0.5)
            except Failure as e:
                print(f"slurm: {e}", file=sys.stderr)
        daemons = {p.pid for _, p in self.daemons}

        def ppid(pid):
            try:
                return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:  # gone already
                return None
        # A job step (slurmstepd) outlives its job by a second or two; slurmctld's own helper (slurmscriptd)
        # ends with it.
        steps = lambda: {p for p in self.processes() - daemons if ppid(p) not in daemons}
        try:
            wait_for("the job steps to end", lambda: not steps(), 10)
        except Failure as e:
            print(f"slurm: {e}", file=sys.stderr)
        for name, proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for pid in self.processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            wait_for("this cluster's processes to end", lambda: not self.processes(), 10)
        except Failure as e:
            print(f"slurm: {e}", file=sys.stderr)

    def processes(self):
        return processes(self.conf)


def newest(pattern, work):
    found = sorted(work.glob(pattern))
    return found[-1] if found else None


def status(folder):
    p = folder / "status"
    return p.read_text().strip() if p.exists() else ""


def lines(folder):
    """records.jsonl's complete lines so far (a run may be writing the next one)."""
    p = folder / "records.jsonl"
    return p.read_bytes().count(b"\n") if p.exists() else 0


def records(folder):
    p = folder / "records.jsonl"
    return [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []


def summary(folder):
    with open(folder / "summary.csv", newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def compare(merged, unsharded):
    """The merged sweep equals the unsharded run: acceptance columns of summary.csv, tokens of every record."""
    (fields, rows), (fields_u, rows_u) = summary(merged), summary(unsharded)
    if fields != fields_u:
        raise Failure(f"summary.csv columns differ: {fields} vs {fields_u}")
    settings = fields[:fields.index("lossy")]  # the sweep's axes come first
    unknown = set(fields) - set(settings) - set(ACCEPTANCE) - set(TIMING)
    if unknown:
        raise Failure(f"summary.csv columns {sorted(unknown)} are neither compared nor known as timing: add them "
                      "to ACCEPTANCE or TIMING in tests/slurm/test_slurm_sweep.py")
    key = lambda row: tuple(row[c] for c in settings)
    a, b = {key(r): r for r in rows}, {key(r): r for r in rows_u}
    if len(a) != len(rows) or a.keys() != b.keys():
        raise Failure(f"summary rows differ: {sorted(a.keys() ^ b.keys())}")
    for k in a:
        for c in ACCEPTANCE:
            if a[k][c] != b[k][c]:
                raise Failure(f"setting {dict(zip(settings, k))}: {c} = {a[k][c]} merged, {b[k][c]} unsharded")
    fields_compared = ("tokens", "new_tokens", "accept_lengths", "proposed_tokens", "accepted_tokens")
    rec = lambda folder: {(r["setting_id"], r["prompt_index"], r["repetition"]): [r[f] for f in fields_compared]
                          for r in records(folder)}
    ra, rb = rec(merged), rec(unsharded)
    if ra != rb:
        diff = sorted(k for k in ra.keys() | rb.keys() if ra.get(k) != rb.get(k))
        raise Failure(f"{len(diff)} records differ, first {diff[0]}")
    return len(rows), len(ra)


def sweep(cluster, source, binary, work):
    started = time.monotonic()
    sets = ["--set", f"experiment.repetitions={REPETITIONS}"]
    # The unsharded reference runs while the cluster starts (which is mostly waiting), then beside the array.
    reference = subprocess.Popen([binary, "run", "experiments/table-sweep.ini", *sets, "--quiet", "--no-plots"],
                                 cwd=work, env=cluster.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True)
    cluster.start()
    print(f"slurm: cluster up in {time.monotonic() - started:.1f} s")
    scripts = source / "experiments" / "slurm"
    small = ["--cpus-per-task=1", "--mem=100M"]  # the scripts' 2 CPUs and 8G would not fit two tasks here
    array = cluster.sbatch("--array=1-2", *small, str(scripts / "sweep.sbatch"), "experiments/table-sweep.ini",
                           *sets, cwd=work)
    task = f"{array}_2"
    # Preemption, once task 2 has written some records: `scontrol requeue` of the running task is what
    # PreemptMode=REQUEUE does (SIGTERM, KillWait, SIGKILL; the task pending again). scancel then requeue would
    # rerun the task as well, but Slurm 22.05 keeps the cancelled attempt as a failure of the array:
    # afterok:ARRAY would never be satisfied.
    folder = wait_for("task 2 to write records", lambda: (d := newest("results/table-sweep/*-shard-2-of-2", work))
                      and lines(d) >= 20 and d, 60, 0.05)
    cluster.run("scontrol", "requeue", task)
    wait_for(f"{task} to end and be pending", lambda: cluster.state(task) == "PENDING"
             and not status(folder).startswith("running"), 30)
    done_before = lines(folder)
    if status(folder) != "interrupted (SIGTERM)":
        raise Failure(f"{folder.name}: status '{status(folder)}' after the requeue, expected interrupted (SIGTERM)"
                      " (a shard that ends before it is preempted needs more REPETITIONS)")
    env = json.loads((folder / "env.json").read_text())
    if env.get("slurm_job") != task:
        raise Failure(f"{folder.name}/env.json: slurm_job '{env.get('slurm_job')}', expected {task}")
    merge = cluster.sbatch(f"--dependency=afterok:{array}", "--mem=100M", str(scripts / "merge.sbatch"),
                           "table-sweep", cwd=work)
    # Slurm holds a requeued job ~2 minutes (its BeginTime): start it now. It resumes its folder.
    cluster.run("scontrol", "update", f"jobid={task}", "StartTime=now")
    end = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}
    final = wait_for("the merge job to end", lambda: (s := cluster.state(merge)) in end and s, 120, 0.2)
    for job in (f"{array}_1", task, merge):
        if cluster.state(job) != "COMPLETED":
            logs = "\n".join(f"--- {p.name}\n{p.read_text()}" for p in sorted((work / "results").glob("slurm-*")))
            raise Failure(f"job {job}: {cluster.state(job)} (merge: {final})\n{logs}")
    try:
        if reference.wait(120) != 0:
            raise Failure(f"unsharded run: exit {reference.returncode}: {reference.stderr.read()}")
    except subprocess.TimeoutExpired:
        raise Failure("the unsharded run did not end in 120 s")
    print(f"slurm: array, preemption, requeue and merge done at {time.monotonic() - started:.1f} s")

    shard2 = sorted(work.glob("results/table-sweep/*-shard-2-of-2*"))
    if shard2 != [folder] or status(folder) != "complete":
        raise Failure(f"task 2 should have completed its folder {folder.name}, found {[d.name for d in shard2]} "
                      f"(status '{status(folder)}')")
    if "resuming" not in (work / f"results/slurm-{task}.out").read_text():
        raise Failure(f"results/slurm-{task}.out does not say the requeued task resumed its folder")
    merged = newest("results/table-sweep/merged-*", work)
    unsharded = next(d for d in (work / "results" / "table-sweep").iterdir() if "shard" not in d.name
                     and not d.name.startswith("merged-"))
    if not merged or status(merged) != "complete" or not list((merged / "plots").glob("*.png")):
        raise Failure(f"merge.sbatch left no complete, plotted merged folder ({merged})")
    rows, n = compare(merged, unsharded)
    print(f"slurm: task 2 interrupted after {done_before} of {len(records(folder))} records, resumed; merged "
          f"{rows} settings x {n // rows} records each = the unsharded run on {', '.join(ACCEPTANCE)} and tokens")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = Path(__file__).resolve().parent
    parser.add_argument("--source", type=Path, default=here.parent.parent)
    parser.add_argument("--binary", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, results)")
    parser.add_argument("--guard", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.guard:
        return guard(args.guard, args.keep)
    source = args.source.resolve()
    binary = (args.binary or source / "build" / "specula").resolve()
    if os.geteuid() != 0:
        skip("needs root (slurmd starts the jobs as their user)")
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [t for t in TOOLS if not shutil.which(t, path=path)]
    if missing:
        skip(f"{', '.join(missing)} not found (setup.sh installs slurm-wlm and munge)")
    for _ in range(20):  # a rebuild may be relinking it
        if binary.exists():
            break
        time.sleep(0.5)
    else:
        skip(f"no specula binary at {binary}")

    root = Path(tempfile.mkdtemp(prefix="specula-slurm-"))
    root.chmod(0o755)  # munged wants every folder above its socket searchable by all
    work = root / "work"
    (work / "results").mkdir(parents=True)
    (work / "experiments").symlink_to(source / "experiments")
    # Nothing of a Slurm job this test may itself run in leaks into the cluster's jobs.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH=path, SLURM_CONF=str(root / "slurm.conf"), SPECULA_BINARY=str(binary))
    cluster = Cluster(root, env)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("slurm: terminated"))  # cleans up like Ctrl-C does
    # The guard's stdin is a pipe only this process writes: it reads EOF when this process ends, even by SIGKILL.
    watchdog = subprocess.Popen([sys.executable, __file__, "--guard", str(root)] + ["--keep"] * args.keep,
                                stdin=subprocess.PIPE, start_new_session=True)
    started = time.monotonic()
    failed = False
    try:
        sweep(cluster, source, binary, work)
    except Failure as e:
        failed = True
        print(f"slurm: FAILED: {e}", file=sys.stderr)
        for log in sorted((root / "log").glob("*")):
            tail = log.read_text(errors="replace").splitlines()[-15:]
            print(f"--- {log.name} (last lines)\n" + "\n".join(tail), file=sys.stderr)
    finally:
        cluster.stop()
        if args.keep:
            print(f"slurm: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        watchdog.stdin.close()
        watchdog.wait()
    print(f"slurm: {'failed' if failed else 'passed'} in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
