#!/usr/bin/env python3
"""A long recording under steady load: does vtrace stay bounded?

  sudo benches/soak.py [--minutes 30] [--every 60] [-o soak.vtrace]   (after cargo build --release)

redis-benchmark loops GET/SET (64 B, 20 clients) against a local
redis-server for the whole run while `vtrace record --interval 1s
--duration M` records everything. Every `--every` seconds it prints
vtrace's resident memory, open fds, CPU time, the size of what it has
written so far (the staging directory: its journal), the size of its last
checkpoint (every table as it stands, rewritten every 10 s) and the occupancy of
its hash maps (entries, read with the bpf syscall: BPF_MAP_GET_NEXT_KEY).
Memory, fds and maps must stay flat; the output may grow only with the
run. The recording's own losses (ring-buffer drops, full maps) are printed
at the end from its overhead.

  sudo benches/soak.py --serve [--minutes 30]

soaks `vtrace serve` instead, under the same load, scraped every second
(as a Prometheus at scrape_interval 1s would): each sample adds the series
it holds, the last scrape's duration and the counters' check (no
vtrace_cpu_seconds_total series fell since the last scrape).
"""
import argparse, ctypes, json, os, subprocess, sys, threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTRACE = os.path.join(ROOT, "target/release/vtrace")
PORT = 6392

libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF = 321
BPF_MAP_GET_NEXT_KEY, BPF_MAP_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD = 4, 14, 15
HASH_TYPES = {1: "hash", 5: "percpu_hash", 9: "lru_hash", 10: "lru_percpu_hash"}


def bpf(cmd, attr):
    return libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))


class MapInfo(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32), ("name", ctypes.c_char * 16), ("pad", ctypes.c_uint8 * 64)]


def map_ids(pid):
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            for line in open(f"/proc/{pid}/fdinfo/{fd}"):
                if line.startswith("map_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def occupancy(map_id):
    """(name, type, entries, max_entries) of a hash map, else None."""
    class ById(ctypes.Structure):
        _fields_ = [("id", ctypes.c_uint32), ("next_id", ctypes.c_uint32), ("open_flags", ctypes.c_uint32)]
    fd = bpf(BPF_MAP_GET_FD_BY_ID, ById(map_id, 0, 0))
    if fd < 0:
        return None
    try:
        info = MapInfo()

        class Info(ctypes.Structure):
            _fields_ = [("fd", ctypes.c_uint32), ("len", ctypes.c_uint32), ("info", ctypes.c_uint64)]
        if bpf(BPF_OBJ_GET_INFO_BY_FD, Info(fd, ctypes.sizeof(info), ctypes.addressof(info))) != 0:
            return None
        if info.type not in HASH_TYPES:
            return None
        key = ctypes.create_string_buffer(info.key_size)
        nxt = ctypes.create_string_buffer(info.key_size)

        class Next(ctypes.Structure):
            _fields_ = [("fd", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("key", ctypes.c_uint64),
                        ("next", ctypes.c_uint64)]
        n, first = 0, True
        while True:
            attr = Next(fd, 0, 0 if first else ctypes.addressof(key), ctypes.addressof(nxt))
            if bpf(BPF_MAP_GET_NEXT_KEY, attr) != 0:
                break
            n += 1
            first = False
            ctypes.memmove(key, nxt, info.key_size)
        return info.name.decode(errors="replace"), HASH_TYPES[info.type], n, info.max_entries
    finally:
        os.close(fd)


def status(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total


def checkpoint_kib(staging):
    try:
        return os.path.getsize(os.path.join(staging, "journal/checkpoint.json")) / 1024
    except OSError:
        return 0


SERVE = "127.0.0.1:9488"


def footprint(pid, start):
    """The sample's first columns: minutes, RSS MiB, open fds, CPU seconds."""
    return (f"{(time.time() - start) / 60:5.1f} {status(pid, 'VmRSS') / 1024:8.1f} "
            f"{len(os.listdir(f'/proc/{pid}/fd')):5d} {cpu_s(pid):7.1f}")


def maps_shown(pid):
    """The fullest hash maps of `pid`: name entries/max."""
    maps = [m for m in (occupancy(i) for i in sorted(map_ids(pid))) if m and m[2] > 0]
    maps.sort(key=lambda m: -m[2])
    return ", ".join(f"{n} {e}/{mx}" for n, _, e, mx in maps[:6])


def start_load():
    """A local redis-server and redis-benchmark looping GET/SET against it."""
    redis = subprocess.Popen(["redis-server", "--port", str(PORT), "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    load = subprocess.Popen(["redis-benchmark", "-p", str(PORT), "-t", "get,set", "-d", "64", "-c", "20",
                             "-n", "1000000000", "-l", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return redis, load


class Scraper(threading.Thread):
    """GET /metrics every second; keeps the last scrape's series and whether any counter fell."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.scrapes = self.failed = self.fell = 0
        self.series = self.took = 0.0
        self.last = {}

    def run(self):
        while not self.stop.wait(1.0):
            try:
                body = urllib.request.urlopen(f"http://{SERVE}/metrics", timeout=10).read().decode()
            except OSError:
                self.failed += 1
                continue
            self.scrapes += 1
            now = {}
            for line in body.splitlines():
                if line.startswith("vtrace_cpu_seconds_total{"):
                    key, value = line.rsplit(" ", 1)
                    now[key] = float(value)
                elif line.startswith("vtrace_series "):
                    self.series = float(line.split()[1])
                elif line.startswith("vtrace_scrape_duration_seconds "):
                    self.took = float(line.split()[1])
            self.fell += sum(1 for k, v in now.items() if v < self.last.get(k, 0))
            self.last = now


def soak_serve(a):
    redis, load = start_load()
    vt = subprocess.Popen([VTRACE, "serve", "--listen", SERVE])
    time.sleep(8)
    scraper = Scraper()
    scraper.start()
    print(f"{'min':>5} {'rss MiB':>8} {'fds':>5} {'cpu s':>7} {'series':>7} {'scrape ms':>9} {'scrapes':>8} "
          f"{'fell':>5}  hash maps (entries/max)", flush=True)
    start = time.time()
    try:
        while time.time() - start < a.minutes * 60 and vt.poll() is None:
            time.sleep(a.every - (time.time() - start) % a.every)
            print(f"{footprint(vt.pid, start)} {scraper.series:7.0f} "
                  f"{scraper.took * 1e3:9.1f} {scraper.scrapes:8d} {scraper.fell:5d}  {maps_shown(vt.pid)}", flush=True)
    finally:
        scraper.stop.set()
        vt.terminate()
        code = vt.wait()
        load.terminate()
        redis.terminate()
    print(f"serve: {scraper.scrapes} scrapes, {scraper.failed} failed, {scraper.fell} counters fell; "
          f"exit {code} after SIGTERM")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("-o", "--output", default="soak.vtrace")
    ap.add_argument("--serve", action="store_true", help="soak vtrace serve, scraped every second")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    if a.serve:
        return soak_serve(a)
    out = os.path.abspath(a.output)
    redis, load = start_load()
    vt = subprocess.Popen([VTRACE, "record", "--force", "--interval", "1s", "--duration", f"{int(a.minutes * 60)}s",
                           "-o", out])
    staging = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.tmp.{vt.pid}")
    print(f"{'min':>5} {'rss MiB':>8} {'fds':>5} {'cpu s':>7} {'written MiB':>12} {'ckpt KiB':>9}  hash maps (entries/max)",
          flush=True)
    start = time.time()
    try:
        while vt.poll() is None:
            time.sleep(a.every - (time.time() - start) % a.every)
            if vt.poll() is not None or not os.path.exists(f"/proc/{vt.pid}"):
                break
            try:
                print(f"{footprint(vt.pid, start)} "
                      f"{du(staging) / 2**20:12.2f} {checkpoint_kib(staging):9.0f}  {maps_shown(vt.pid)}", flush=True)
            except (OSError, ValueError):
                break
        vt.wait()
    finally:
        load.terminate()
        redis.terminate()
    meta = json.load(open(os.path.join(out, "meta.json")))
    ov = meta["overhead"]
    print(f"recording: {du(out) / 2**20:.2f} MiB in {out}; peak RSS {ov['vtrace_peak_rss_kib'] / 1024:.1f} MiB; "
          f"losses: {', '.join(f'{k} {v}' for k, v in sorted(ov.get('losses', {}).items())) or 'none'}; "
          f"checkpoints {ov.get('checkpoints', 0)}, "
          f"{ov.get('checkpoint_ns', 0) / max(ov.get('checkpoints', 0), 1) / 1e6:.1f} ms each on average")


if __name__ == "__main__":
    main()
