/**
 * History reads (usage logs, their export and statistics, the ledger) run a few at a time per node, each caller
 * holding at most 4. The waiting ones were served first come, first served: a user with 4 slow reads queued made
 * everyone else's read wait for all 4. Now waiting reads are served round-robin by caller, so a second user's read
 * runs after at most one more of the first user's per freed slot, before the first user's backlog has drained.
 * Over real HTTP, on a node whose reads are slow (deep pages of a 200,000-row history).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test';
import { makeUser, startGateway, type TestGateway } from '../helpers/gateway';
import { seedGatewayUsageRows } from '../helpers/usage-seed';

let gw: TestGateway;
// alice (id 2) owns about half of the seeded rows (the seed's users are 1 and 2); bob owns none.
let alice: { id: number; token: string };
let bob: { id: number; token: string };

beforeAll(async () => {
  gw = await startGateway();
  alice = await makeUser(gw);
  bob = await makeUser(gw);
  await seedGatewayUsageRows(gw.services, { rows: 200_000, from: Date.UTC(2026, 0, 1) / 1000, spanSeconds: 30 * 86_400, users: 2 });
  if (!gw.services.dbh) await gw.db.all('vacuum analyze usage_logs');
}, 120_000);
afterAll(async () => { await gw.stop(); });

test("a second user's read is served before the first user's queued reads have all run", async () => {
  // The shares and slots are per node: node 1 directly (a cluster run's proxy would spread the requests).
  const node = gw.nodeUrl;
  const gate = gw.services.historyReads;
  const done: string[] = [];
  const read = (who: string, path: string, token: string) => fetch(node + path, { headers: { authorization: `Bearer ${token}` } })
    .then(async (res) => { await res.arrayBuffer(); expect(res.status).toBe(200); done.push(who); });
  // Four deep pages of alice's history (each a long OFFSET walk), her whole share.
  const backlog = Array.from({ length: 4 }, (_, i) => read(`alice${i}`, `/api/log/self?page_size=100&p=${900 + i}`, alice.token));
  const deadline = Date.now() + 10_000;
  while (gate.heldBy(alice.id) < 4 && Date.now() < deadline) await Bun.sleep(0);
  expect(gate.heldBy(alice.id)).toBe(4);
  // Bob's first page (a few rows: he has none) arrives behind her queued reads.
  const bobs = read('bob', '/api/log/self', bob.token);
  await Promise.all([...backlog, bobs]);
  console.log(`completion order: ${done.join(' ')}`);
  // FIFO served bob last, after all four of alice's; in turns he is served before her last one.
  expect(done.indexOf('bob')).toBeLessThan(4);
}, 60_000);
