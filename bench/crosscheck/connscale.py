#!/usr/bin/env python3
"""connscale's pattern with nothing of sluice in it: many connections, each
sends "Ping\\n" every INTERVAL and waits for "Pong\\n" with a timeout.

A cross-check for `bin/sluice load --scenario scale`: plain Python asyncio,
one OS process per PROCS (each process may open at most ~20,000 files here),
connections spread over SOURCE addresses (~28k ports per source address).

  connscale.py --port 8000 --conns 100000 --procs 6 \
      --sources 127.0.0.2-127.0.0.9 --interval 10 --rounds 4 --timeout 5
"""
import argparse, asyncio, json, multiprocessing as mp, socket, sys, time


def sources(spec):
    a, b = spec.split('-') if '-' in spec else (spec, spec)
    pre, lo = a.rsplit('.', 1)
    hi = b.rsplit('.', 1)[-1]
    return ['%s.%d' % (pre, i) for i in range(int(lo), int(hi) + 1)]


async def one(host, port, src, start, frac, a, out):
    await asyncio.sleep(start)
    try:
        r, w = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(src, 0)), a.timeout)
    except Exception as e:
        out['failed'][type(e).__name__] = out['failed'].get(type(e).__name__, 0) + 1
        return
    out['established'] += 1
    # the rounds begin once the ramp is over, each connection at its own
    # offset in the interval (as connscale's clients did), not all at once
    await asyncio.sleep(max(0.0, a.ramp_end + frac * a.interval - time.monotonic()))
    for k in range(a.rounds):
        t0 = time.monotonic()
        try:
            w.write(b'Ping\n')
            line = await asyncio.wait_for(r.readexactly(5), a.timeout)
            if line != b'Pong\n':
                out['bad'] += 1
            else:
                out['lat'][k].append(time.monotonic() - t0)
        except asyncio.TimeoutError:
            out['timeouts'][k] += 1
        except Exception as e:
            out['failed'][type(e).__name__] = out['failed'].get(type(e).__name__, 0) + 1
            return
        await asyncio.sleep(max(0.0, a.interval - (time.monotonic() - t0)))
    out['held'] += 1
    w.close()


def proc(i, a, q):
    srcs = sources(a.sources)
    n = a.conns // a.procs + (1 if i < a.conns % a.procs else 0)
    out = {'established': 0, 'held': 0, 'bad': 0, 'failed': {},
           'timeouts': [0] * a.rounds, 'lat': [[] for _ in range(a.rounds)]}
    rate = a.rate / a.procs

    async def main():
        t = time.monotonic()
        await asyncio.gather(*[one(a.host, a.port, srcs[(i + j * a.procs) % len(srcs)],
                                   j / rate, j / n, a, out) for j in range(n)])
        out['secs'] = time.monotonic() - t
    asyncio.run(main())
    q.put(out)


def pct(xs, p):
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000 if xs else float('nan')


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--host', default='127.0.0.1')
    p.add_argument('--port', type=int, required=True)
    p.add_argument('--conns', type=int, default=1000)
    p.add_argument('--procs', type=int, default=1)
    p.add_argument('--sources', default='127.0.0.1')
    p.add_argument('--rate', type=float, default=5000.0, help='connects/s in all')
    p.add_argument('--interval', type=float, default=10.0)
    p.add_argument('--rounds', type=int, default=4)
    p.add_argument('--timeout', type=float, default=5.0)
    a = p.parse_args()
    a.ramp_end = time.monotonic() + a.conns / a.rate + 2.0
    q = mp.Queue()
    ps = [mp.Process(target=proc, args=(i, a, q)) for i in range(a.procs)]
    t0 = time.monotonic()
    for x in ps:
        x.start()
    outs = [q.get() for _ in ps]
    for x in ps:
        x.join()
    est = sum(o['established'] for o in outs)
    failed = {}
    for o in outs:
        for k, v in o['failed'].items():
            failed[k] = failed.get(k, 0) + v
    print('established %d of %d in %.1f s ramp (%.0f/s asked); held all rounds: %d; failed %s; bad replies %d'
          % (est, a.conns, a.conns / a.rate, a.rate, sum(o['held'] for o in outs), failed or 0,
             sum(o['bad'] for o in outs)))
    for k in range(a.rounds):
        lat = sorted(x for o in outs for x in o['lat'][k])
        print('round %d: %d pongs, %d timeouts, latency ms p50 %.2f p90 %.2f p99 %.2f max %.2f'
              % (k + 1, len(lat), sum(o['timeouts'][k] for o in outs),
                 pct(lat, .5), pct(lat, .9), pct(lat, .99), lat[-1] * 1000 if lat else float('nan')))
    print('total %.1f s' % (time.monotonic() - t0))
    bad = est < a.conns or any(sum(o['timeouts']) for o in outs)
    sys.exit(1 if bad else 0)


if __name__ == '__main__':
    main()
