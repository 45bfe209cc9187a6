#!/usr/bin/env python3
"""Does a probe's cost grow with what it tracks? Prints ns per event per
program (the kernel's BPF statistics, on for the whole run) as the number of
busy threads and of veth pairs grows, with the size of vtrace's maps and
anything they could not hold.

  sudo benches/scale.py [--threads 1,10,100,1000] [--pairs 1,8,64] [--seconds 3]
                        (after cargo build --release)

Threads: N processes each copying /dev/zero to /dev/null 512 B at a time for
the same wall time (syscalls on every CPU, preemptions between them), under
`--layers cpu`. Veth pairs: K network namespaces, each joined to the host by
a veth pair, all flood-pinged at once, under `--layers cpu,net`. A per-probe
cost that stays flat from the smallest to the largest setting is the claim;
the thread map (32768 entries) and the device maps count what overflowed.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRACE = os.path.join(ROOT, "target/release/vtrace")


def record(tmp, name, layers, cmd):
    rec = os.path.join(tmp, name)
    p = subprocess.run([VTRACE, "record", "--self-stats", "always", "--layers", layers, "-o", rec, "--",
                        "sh", "-c", cmd], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{name}: {p.stderr[-800:]}")
    r = json.loads(subprocess.run([VTRACE, "report", "--format", "json", rec], capture_output=True, text=True,
                                  check=True).stdout)
    shutil.rmtree(rec, ignore_errors=True)
    return r


def program_costs(r):
    return {p["program"]: (p["ns_per_event"], p["events"]) for p in r["overhead"]["programs"]
            if p["run_count"] > 0}


def table(title, rows, programs):
    print(f"\n== {title}: ns per event (events)")
    print(f"{'setting':<14}" + "".join(f"{p[4:] if p.startswith('raw_') else p:>24}" for p in programs)
          + f"{'threads seen':>14}{'lost':>6}")
    for label, r in rows:
        c = program_costs(r)
        o = r["overhead"]
        lost = o["thread_map_overflows"] + o["net_event_drops"] + sum(p["recursion_misses"] for p in o["programs"])
        cells = "".join(f"{'%.0f (%d)' % c[p] if p in c else '-':>24}" for p in programs)
        print(f"{label:<14}{cells}{len(r['threads']):>14}{lost:>6}")


def busy_threads(tmp, counts, seconds):
    rows = []
    for n in counts:
        cmd = (f"for i in $(seq {n}); do timeout {seconds} dd if=/dev/zero of=/dev/null bs=512 "
               f"status=none & done; wait; true")
        rows.append((f"{n} busy", record(tmp, f"t{n}.vtrace", "cpu", cmd)))
        print(f"threads {n} done", file=sys.stderr)
    table("busy threads (--layers cpu)", rows,
          ["raw_sys_enter", "raw_sys_exit", "btf_sched_switch", "raw_softirq_entry", "raw_softirq_exit"])


def sh(*args, check=True):
    return subprocess.run(args, check=check, capture_output=True, text=True)


def veth_pairs(tmp, counts, seconds):
    rows = []
    made = []
    try:
        for k in counts:
            while len(made) < k:
                i = len(made)
                ns, host, peer = f"vsc{i}", f"vsc{i}h", f"vsc{i}n"
                made.append(i)
                sh("ip", "netns", "add", ns)
                sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
                sh("ip", "link", "set", peer, "netns", ns)
                sh("sysctl", "-qw", f"net.ipv6.conf.{host}.disable_ipv6=1")
                sh("ip", "addr", "add", f"10.201.{i}.1/24", "dev", host)
                sh("ip", "link", "set", host, "up")
                sh("ip", "-n", ns, "addr", "add", f"10.201.{i}.2/24", "dev", peer)
                sh("ip", "-n", ns, "link", "set", peer, "up")
            # The same number of pings in all; spread over K pairs at once.
            per = max(1, 40000 // k)
            cmd = " ".join(f"ping -q -f -c {per} -w {seconds * 3} 10.201.{i}.2 >/dev/null &" for i in range(k))
            rows.append((f"{k} pairs", record(tmp, f"v{k}.vtrace", "cpu,net", cmd + " wait; true")))
            print(f"pairs {k} done", file=sys.stderr)
    finally:
        for i in made:
            sh("ip", "link", "del", f"vsc{i}h", check=False)
            sh("ip", "netns", "del", f"vsc{i}", check=False)
    table("veth pairs flood-pinged at once (--layers cpu,net)", rows,
          ["btf_net_dev_xmit", "btf_netif_receive_skb", "raw_napi_gro_receive_entry", "raw_sys_enter",
           "btf_sched_switch"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,10,100,1000")
    ap.add_argument("--pairs", default="1,8,64")
    ap.add_argument("--seconds", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("scale.py: run as root (it loads eBPF programs and creates network namespaces)")
    tmp = tempfile.mkdtemp(prefix="vtrace-scale-")
    try:
        if args.threads:
            busy_threads(tmp, [int(x) for x in args.threads.split(",")], args.seconds)
        if args.pairs:
            veth_pairs(tmp, [int(x) for x in args.pairs.split(",")], args.seconds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
