import { afterEach, beforeEach, describe, expect, test } from 'bun:test';
import { ChangeBus, SecretBox, silentLogger } from '@gw/core';
import { ChannelsRepo, ROLE, openDatabase, type DbHandle } from '@gw/db';
import { ChannelRegistry } from './registry';
import { ChannelService } from './service';

/** Who edits the channels here: root, who may change every field. */
const ROOT = { role: ROLE.root };

let dbh: DbHandle;
let bus: ChangeBus;
let secrets: SecretBox;
let service: ChannelService;
let registry: ChannelRegistry;
beforeEach(async () => {
  dbh = openDatabase(':memory:');
  bus = new ChangeBus();
  secrets = new SecretBox(crypto.getRandomValues(new Uint8Array(32)));
  const repo = new ChannelsRepo(dbh.db);
  service = new ChannelService(repo, secrets, bus);
  registry = await ChannelRegistry.load(repo, secrets, bus, silentLogger);
});
afterEach(() => { registry.close(); dbh.close(); });

const add = (over: Record<string, unknown> = {}) =>
  service.create({ name: 'c', type: 'anthropic', base_url: 'https://x.example', key: 'k-123456789', models: ['m1'], ...over } as any);

describe('ChannelRegistry', () => {
  test('candidates: enabled, serving the model, open to the group, by priority desc then id', async () => {
    const a = await add({ priority: 1 });
    const b = await add({ priority: 5 });
    const c = await add({ priority: 5, group: 'vip,default' });
    await add({ models: ['m2'] });
    const v = await add({ group: 'vip' });
    await add({ status: 2 });
    expect(registry.candidates('m1', 'default').map((x) => x.id)).toEqual([b.id, c.id, a.id]);
    expect(registry.candidates('m1', 'vip').map((x) => x.id)).toEqual([c.id, v.id]);
    expect(registry.candidates('nope', 'default')).toEqual([]);
    registry.candidates('m1', 'default').reverse();
    expect(registry.candidates('m1', 'default')[0]!.id).toBe(b.id);
    expect(registry.models('default')).toEqual(['m1', 'm2']);
    expect(registry.get(a.id)?.apiKey).toBe('k-123456789');
  });

  test('follows every write through the bus, including many-row writes', async () => {
    const a = await add({ tag: 't' });
    const b = await add({ tag: 't' });
    await service.setTagStatus('t', 2);
    expect(registry.candidates('m1', 'default')).toEqual([]);
    await service.setTagStatus('t', 1);
    expect(registry.candidates('m1', 'default')).toHaveLength(2);
    await service.update(ROOT, { id: a.id, models: ['m3'] });
    expect(registry.candidates('m3', 'default').map((x) => x.id)).toEqual([a.id]);
    await service.setStatus(b.id, 3, 'failing');
    expect(registry.get(b.id)?.status).toBe(3);
    expect(registry.candidates('m1', 'default')).toEqual([]);
    await service.deleteMany([a.id, b.id]);
    expect(registry.all()).toEqual([]);
  });

  test('setStatus never re-enables a channel an operator disabled', async () => {
    const a = await add({ status: 2 });
    await service.setStatus(a.id, 1, 'probe ok');
    await service.setStatus(a.id, 3, 'failing');
    expect(registry.get(a.id)?.status).toBe(2);
    await service.setStatus(999, 3, 'unknown ids are ignored');
  });

  test('a channel whose key cannot be opened is left out, not served with garbage', async () => {
    const a = await add();
    // A row from before multi-key support (`keys` empty): its `key` is the only key.
    dbh.sqlite.query("update channels set key = ?, keys = '[]' where id = ?").run(new SecretBox(new Uint8Array(32).fill(7)).seal('other'), a.id);
    await registry.refresh(a.id);
    expect(registry.get(a.id)).toBeUndefined();
    expect((await service.get(a.id)).key).toContain('unreadable');
  });

  test('several keys: an unreadable one is left out, the channel keeps the others; `apiKey` is the first usable', async () => {
    const a = await add({ keys: ['k-second-22222', 'k-third-333333'] });
    expect(registry.get(a.id)!.keys.map((k) => [k.id, k.apiKey])).toEqual([[1, 'k-123456789'], [2, 'k-second-22222'], [3, 'k-third-333333']]);
    const row = dbh.sqlite.query('select keys from channels where id = ?').get(a.id) as { keys: string };
    const keys = JSON.parse(row.keys);
    keys[0].key = new SecretBox(new Uint8Array(32).fill(7)).seal('other');
    keys[1].status = 3;
    dbh.sqlite.query('update channels set keys = ? where id = ?').run(JSON.stringify(keys), a.id);
    await registry.refresh(a.id);
    expect(registry.get(a.id)!.keys.map((k) => [k.id, k.status])).toEqual([[2, 3], [3, 1]]);
    expect(registry.get(a.id)!.apiKey).toBe('k-third-333333');
  });
});

describe('ChannelRegistry: incremental updates', () => {
  /** Every (group, model) list and every group's models, as a registry shows them. */
  const snapshot = (r: ChannelRegistry, groups: string[], models: string[]) => ({
    lists: groups.flatMap((g) => models.map((m) => `${g}/${m}: ${r.candidates(m, g).map((c) => `${c.id}@${c.priority}`).join(',')}`)),
    models: groups.map((g) => `${g}: ${r.models(g).join(',')}`),
    all: r.all().map((c) => `${c.id}:${c.status}:${c.priority}`).sort(),
  });

  test('a random sequence of writes leaves the index exactly as a full rebuild would, without ever reloading every row', async () => {
    const repo = new ChannelsRepo(dbh.db);
    let fullReads = 0;
    const spied = Object.assign(Object.create(repo), { all: () => { fullReads++; return repo.all(); } }) as ChannelsRepo;
    const incremental = await ChannelRegistry.load(spied, secrets, bus, silentLogger);
    expect(fullReads).toBe(1);
    let seed = 12345;
    const rnd = (n: number) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
    const groups = ['default', 'vip', 'free'];
    const models = ['m0', 'm1', 'm2', 'm3'];
    const pickModels = () => [...new Set(Array.from({ length: 1 + rnd(3) }, () => models[rnd(models.length)]!))];
    const pickGroups = () => [...new Set(Array.from({ length: 1 + rnd(2) }, () => groups[rnd(groups.length)]!))].join(',');
    const ids: number[] = [];
    for (let step = 0; step < 400; step++) {
      const op = ids.length < 5 ? 0 : rnd(7);
      const id = ids[rnd(ids.length)]!;
      if (op === 0 || op === 1) {
        ids.push((await add({ priority: rnd(4), models: pickModels(), group: pickGroups(), tag: `t${rnd(3)}`, status: rnd(5) ? 1 : 2 })).id);
      } else if (op === 2) {
        await service.update(ROOT, { id, priority: rnd(4) });
      } else if (op === 3) {
        await service.update(ROOT, { id, models: pickModels(), group: pickGroups(), status: (1 + rnd(2)) as 1 | 2 });
      } else if (op === 4) {
        await service.delete(id);
        ids.splice(ids.indexOf(id), 1);
      } else if (op === 5) {
        await service.setStatus(id, rnd(2) ? 3 : 1, 'probe');
      } else if (rnd(2)) {
        await service.setTagStatus(`t${rnd(3)}`, (1 + rnd(2)) as 1 | 2);
      } else {
        const gone = [ids[rnd(ids.length)]!, ids[rnd(ids.length)]!];
        await service.deleteMany(gone);
        for (const g of new Set(gone)) ids.splice(ids.indexOf(g), 1);
      }
      if (step % 20 === 19 || step === 399) {
        const rebuilt = await ChannelRegistry.load(repo, secrets, new ChangeBus(), silentLogger);
        expect(snapshot(incremental, groups, models)).toEqual(snapshot(rebuilt, groups, models));
        rebuilt.close();
      }
    }
    // Only the start-up load read the whole table: every write above was applied row by row.
    expect(fullReads).toBe(1);
    incremental.close();
  });

  test('a model nobody serves any more disappears from models()', async () => {
    const a = await add({ models: ['only-here'] });
    expect(registry.models('default')).toContain('only-here');
    await service.update(ROOT, { id: a.id, status: 2 });
    expect(registry.models('default')).not.toContain('only-here');
    await service.update(ROOT, { id: a.id, status: 1, group: 'vip' });
    expect(registry.models('default')).not.toContain('only-here');
    expect(registry.models('vip')).toEqual(['only-here']);
  });
});
