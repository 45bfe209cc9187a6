#!/usr/bin/env python3
"""What vtrace costs the workload, beside the tools users would otherwise use.

Interleaved rounds: in each round every configuration runs the same loads
once (order rotated per round), so drift (thermal, noisy neighbours) hits
all configurations alike. Throughput is reported as a ratio to the
untraced run of the same round: median over rounds and [min, max].

  sudo benches/overhead.py [--rounds 7] [--requests 50000] [--iperf-seconds 2]
                           [--only "CONFIG;..."]   (after cargo build --release)

Loads: redis-benchmark GET/SET, 64 B values, 20 clients, over loopback
against a local redis-server; iperf3 over loopback. vtrace rounds also
report vtrace's own cost from the recording: events per second, its
process's CPU time and peak RSS, and anything lost (ring-buffer drops, full
maps); ns per event per program (kernel BPF stats) come from one more run
per configuration with the statistics on throughout. Reference points:
vtrace with the kernel's BPF statistics on for the whole run (their cost),
and empty BPF programs (bpftrace, classic tracepoints) on the CPU layer's
hooks (the floor any BPF tool pays for hooking every syscall and softirq),
without the syscall hooks (the floor of `--cpu-split ticks`), and without
them but with the net layer's hooks.
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, threading, time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRACE = os.path.join(ROOT, "target/release/vtrace")
REDIS_PORT, IPERF_PORT = 6391, 5291

BPFTRACE_SCRIPT = r"""
tracepoint:raw_syscalls:sys_enter { @start[tid] = nsecs; }
tracepoint:raw_syscalls:sys_exit /@start[tid]/ { @sys[tid] = sum(nsecs - @start[tid]); delete(@start[tid]); }
tracepoint:irq:softirq_entry { @si[cpu] = nsecs; }
tracepoint:irq:softirq_exit /@si[cpu]/ { @soft[tid] = sum(nsecs - @si[cpu]); delete(@si[cpu]); }
tracepoint:irq:irq_handler_entry { @hi[cpu] = nsecs; }
tracepoint:irq:irq_handler_exit /@hi[cpu]/ { @hard[tid] = sum(nsecs - @hi[cpu]); delete(@hi[cpu]); }
tracepoint:sched:sched_switch { @switches[args->prev_pid] = count(); }
"""

# The floor for any BPF tool on the CPU layer's hooks: programs that do nothing.
EMPTY_SCRIPT = " ".join(f"tracepoint:{tp} {{ }}" for tp in [
    "raw_syscalls:sys_enter", "raw_syscalls:sys_exit", "sched:sched_switch", "irq:softirq_entry",
    "irq:softirq_exit", "irq:irq_handler_entry", "irq:irq_handler_exit"])

# The floor for the tick split's hooks (no raw_syscalls).
EMPTY_NO_SYSCALLS = " ".join(f"tracepoint:{tp} {{ }}" for tp in [
    "sched:sched_switch", "irq:softirq_entry", "irq:softirq_exit", "irq:irq_handler_entry", "irq:irq_handler_exit"])

# The floor for the tick split's hooks plus the net layer's.
EMPTY_NET = EMPTY_NO_SYSCALLS + " " + " ".join(f"tracepoint:{tp} {{ }}" for tp in [
    "net:net_dev_queue", "net:net_dev_start_xmit", "net:net_dev_xmit", "net:netif_rx", "net:netif_receive_skb",
    "napi:napi_poll", "skb:consume_skb", "skb:kfree_skb"])

# name -> (kind, vtrace flags or background command). "vtrace default" is
# plain `vtrace record`; each "+" row turns one costlier option on.
CONFIGS = {
    "untraced": ("none", None),
    "vtrace default": ("vtrace", []),
    "vtrace cpu only": ("vtrace", ["--layers", "cpu"]),
    "+ exact split": ("vtrace", ["--cpu-split", "syscalls"]),
    "+ hops": ("vtrace", ["--hops"]),
    "+ events": ("vtrace", ["--events"]),
    "+ stacks 99Hz": ("vtrace", ["--sample", "99"]),
    "+ stats always": ("vtrace", ["--self-stats", "always"]),
    # The layers of issue #15, each beside the default ones.
    "+ runq": ("vtrace", ["--layers", "cpu,net,tun,kvm,uprobe,runq"]),
    "+ block": ("vtrace", ["--layers", "cpu,net,tun,kvm,uprobe,block"]),
    "+ fs": ("vtrace", ["--layers", "cpu,net,tun,kvm,uprobe,fs"]),
    "everything": ("vtrace", ["--cpu-split", "syscalls", "--events", "--sample", "99"]),
    # `vtrace serve` (the default layers) scraped every second, as Prometheus at scrape_interval 1s.
    "vtrace serve, scraped 1/s": ("serve", []),
    "bpftrace (same states)": ("background", ["bpftrace", "-e", BPFTRACE_SCRIPT]),
    "empty BPF, same hooks": ("background", ["bpftrace", "-e", EMPTY_SCRIPT]),
    "empty BPF, no syscall hooks": ("background", ["bpftrace", "-e", EMPTY_NO_SYSCALLS]),
    "empty BPF, tick-split + net hooks": ("background", ["bpftrace", "-e", EMPTY_NET]),
    # The sampler's floor: the cpu-clock timer at 999 Hz on every CPU, with an empty BPF program / with perf.
    "empty BPF, profile 999Hz": ("background", ["bpftrace", "-e", "profile:hz:999 { }"]),
    "perf record -a -g -F 99": ("background", ["perf", "record", "-a", "-g", "-F", "99", "-o", "{tmp}/perf.data"]),
    "perf record -a -g -F 999": ("background", ["perf", "record", "-a", "-g", "-F", "999", "-o", "{tmp}/perf.data"]),
    "mpstat 1": ("background", ["mpstat", "1"]),
}

# The rows the closing table of issue #13 asks for (`--only default-set`).
DEFAULT_SET = ["vtrace default", "+ exact split", "+ hops", "+ events", "+ stacks 99Hz",
               "bpftrace (same states)", "perf record -a -g -F 99"]

# What the targets are, printed beside the measured figures.
TARGETS = "targets: default self-cost <= 3 % of capacity; default throughput ratio >= 0.97 on redis and iperf3"


def loads(args):
    redis = f"redis-benchmark -p {REDIS_PORT} -t get,set -d 64 -c 20 -n {args.requests} --csv"
    iperf = f"iperf3 -c 127.0.0.1 -p {IPERF_PORT} -t {args.iperf_seconds} -J"
    return {"redis": redis, "iperf3": iperf}


def throughput(load, out):
    """Requests/s (SET and GET summed) or bits/s."""
    if load == "redis":
        total = 0.0
        for line in out.splitlines():
            f = [x.strip('"') for x in line.split(",")]
            if f and f[0] in ("SET", "GET"):
                total += float(f[1])
        return total
    start = out.find("{")
    return json.loads(out[start:])["end"]["sum_received"]["bits_per_second"]


SERVE = "127.0.0.1:9489"


def serve_round(load, cmd):
    """The load beside `vtrace serve`, scraped every second: its throughput,
    and serve's own CPU seconds while the load ran."""
    vt = subprocess.Popen([VTRACE, "serve", "--listen", SERVE], stderr=subprocess.PIPE, text=True)
    line = vt.stderr.readline()
    if "probes attached" not in line:
        raise RuntimeError(f"vtrace serve did not start: {line}")
    done = threading.Event()

    def scrape():
        while not done.wait(1.0):
            try:
                urllib.request.urlopen(f"http://{SERVE}/metrics", timeout=10).read()
            except OSError:
                pass
    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    cpu = lambda: sum(int(x) for x in open(f"/proc/{vt.pid}/stat").read().rsplit(")", 1)[1].split()[11:13])
    before = cpu()
    try:
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True)
        used = (cpu() - before) / os.sysconf("SC_CLK_TCK")
    finally:
        done.set()
        vt.terminate()
        vt.wait()
    return throughput(load, p.stdout), used


def run_round(name, load, cmd, tmp, idx, more=()):
    kind, extra = CONFIGS[name]
    extra = list(extra or []) + list(more)
    rec = os.path.join(tmp, f"r{idx}.vtrace")
    if kind == "serve":
        tput, used = serve_round(load, cmd)
        SERVE_CPU.setdefault(load, []).append(used)
        return tput, None
    if kind == "vtrace":
        full = [VTRACE, "record", "-o", rec, *extra, "--", "sh", "-c", cmd]
        p = subprocess.run(full, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{name}: {p.stderr[-500:]}")
        return throughput(load, p.stdout), rec
    bg = None
    if kind == "background":
        argv = [a.replace("{tmp}", tmp) for a in extra]
        bg = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
        if argv[0] == "bpftrace":
            # Wait for "Attaching N probes..." so the load runs traced.
            seen = []
            while not seen or "Attaching" not in seen[-1]:
                line = bg.stdout.readline()
                if not line or len(seen) > 10:
                    raise RuntimeError(f"bpftrace did not start: {''.join(seen)}")
                seen.append(line)
            time.sleep(0.5)
        else:
            time.sleep(1.0)
    try:
        p = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True)
        return throughput(load, p.stdout), None
    finally:
        if bg:
            os.killpg(bg.pid, signal.SIGINT)
            try:
                bg.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(bg.pid, signal.SIGKILL)
                bg.communicate()


# load -> serve's CPU seconds per run.
SERVE_CPU = {}


def vtrace_cost(rec):
    r = json.loads(subprocess.run([VTRACE, "report", "--format", "json", rec], capture_output=True,
                                  text=True, check=True).stdout)
    o = r["overhead"]
    wall = r["wall_ns"] / 1e9
    progs = {p["program"]: p for p in o["programs"] if p["run_count"] > 0 and p["events"] > 0}
    return {
        "self_cost_pct": 100.0 * r.get("self_cost_fraction", 0.0),
        "bpf_cpu_pct": 100.0 * o["bpf_run_time_ns"] / (r["wall_ns"] * r["cpus"]),
        "events_per_s": o["bpf_run_count"] / wall,
        "vtrace_cpu_s": (o["vtrace_user_ns"] + o["vtrace_system_ns"]) / 1e9,
        "peak_rss_mib": o["vtrace_peak_rss_kib"] / 1024,
        "lost": o["net_event_drops"] + o["thread_map_overflows"] + o.get("sample_drops", 0)
        + sum(p["recursion_misses"] for p in o["programs"]),
        "ns": {k: (p["ns_per_event"], p["events"] / wall) for k, p in progs.items()},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--requests", type=int, default=50000)
    ap.add_argument("--iperf-seconds", type=int, default=2)
    ap.add_argument("--only", default="", help="configuration names separated by ; (untraced always runs)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("overhead.py: run as root (it loads eBPF programs)")
    names = list(CONFIGS)
    if args.only:
        want = set(DEFAULT_SET) if args.only == "default-set" else set(x.strip() for x in args.only.split(";"))
        names = [n for n in names if n == "untraced" or n in want]
    tmp = tempfile.mkdtemp(prefix="vtrace-overhead-")
    servers = [
        subprocess.Popen(["redis-server", "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no"],
                         stdout=subprocess.DEVNULL),
        subprocess.Popen(["iperf3", "-s", "-p", str(IPERF_PORT)], stdout=subprocess.DEVNULL),
    ]
    time.sleep(1)
    results = {(n, l): [] for n in names for l in loads(args)}
    costs = {(n, l): [] for n in names for l in loads(args)}
    timed = {}
    try:
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for load, cmd in loads(args).items():
                base = None
                got = {}
                for i, name in enumerate(order):
                    tput, rec = run_round(name, load, cmd, tmp, i)
                    got[name] = tput
                    if rec:
                        costs[(name, load)].append(vtrace_cost(rec))
                        shutil.rmtree(rec, ignore_errors=True)
                base = got["untraced"]
                for name in names:
                    results[(name, load)].append((got[name], got[name] / base))
            print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
        # ns per event: sampled windows land on start-up when a load is short,
        # so one more run per configuration keeps the statistics on throughout.
        for name in names:
            if CONFIGS[name][0] != "vtrace" or "--self-stats" in CONFIGS[name][1]:
                continue
            for load, cmd in loads(args).items():
                _, rec = run_round(name, load, cmd, tmp, 0, ["--self-stats", "always"])
                timed[(name, load)] = vtrace_cost(rec)
                shutil.rmtree(rec, ignore_errors=True)
    finally:
        for s in servers:
            s.terminate()
            s.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    for load in loads(args):
        unit = "req/s (SET+GET)" if load == "redis" else "Gbit/s"
        scale = 1 if load == "redis" else 1e-9
        print(f"\n== {load}: throughput ratio to untraced, {args.rounds} interleaved rounds")
        print(TARGETS)
        print(f"{'configuration':<34}{'median '+unit:>24}{'ratio':>8}{'[min, max]':>16}"
              f"{'cost %cap':>10}{'[min, max]':>16}{'bpf %cap':>10}{'events/s':>11}{'vtrace cpu s':>13}{'rss MiB':>9}{'lost':>6}")
        for name in names:
            rows = results[(name, load)]
            tput = statistics.median(r[0] for r in rows) * scale
            ratios = [r[1] for r in rows]
            line = (f"{name:<34}{tput:>24.1f}{statistics.median(ratios):>8.3f}"
                    f"{'[%.3f, %.3f]' % (min(ratios), max(ratios)):>16}")
            c = costs[(name, load)]
            if c:
                med = lambda k: statistics.median(x[k] for x in c)
                cost = [x["self_cost_pct"] for x in c]
                line += (f"{med('self_cost_pct'):>10.2f}{'[%.2f, %.2f]' % (min(cost), max(cost)):>16}"
                         f"{med('bpf_cpu_pct'):>10.2f}{med('events_per_s'):>11.0f}{med('vtrace_cpu_s'):>13.2f}"
                         f"{med('peak_rss_mib'):>9.0f}{max(x['lost'] for x in c):>6}")
            elif CONFIGS[name][0] == "serve" and SERVE_CPU.get(load):
                line += f"{'':>36}{'':>10}{'':>11}{statistics.median(SERVE_CPU[load]):>13.2f}"
            print(line)
        print(f"\n   ns per event and events/s per program under {load} (one more run with --self-stats always):")
        for name in names:
            c = timed.get((name, load))
            if not c:
                continue
            progs = sorted(c["ns"], key=lambda p: -c["ns"][p][1])
            parts = [f"{p} {c['ns'][p][0]:.0f} ns ({c['ns'][p][1] / 1000:.0f}k/s)" for p in progs[:12]]
            print(f"   {name}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
