import { describe, expect, test } from 'bun:test';
import type { ContractRepos, MakeEnv } from './env';
import { BIG, useEnv } from './setup';

type NewChannel = Parameters<ContractRepos['channels']['insert']>[0];
const channel = (over: Partial<NewChannel> = {}): NewChannel => ({
  name: 'c', type: 'openai', baseUrl: 'http://127.0.0.1:1', key: 'k', models: ['m-1'], modelMapping: {}, headers: {},
  createdAt: 1, updatedAt: 1, ...over,
});

/** Channels, groups and prices. */
export function channelsContract(make: MakeEnv): void {
  describe('channels', () => {
    const env = useEnv(make);

    test('defaults and every JSON column round-trip as structures', async () => {
      const { channels } = env().repos;
      const c = await channels.insert(channel({ models: ['a', 'b'], modelMapping: { a: 'up-a' }, headers: { 'x-h': '1' } }));
      expect(c).toMatchObject({
        group: 'default', tag: '', priority: 0, weight: 1, status: 1, timeoutMs: 300_000, headerPolicy: {}, keys: [], keySelection: 'random',
        failureRules: {}, firstByteTimeoutMs: null, probeIntervalMs: null, statusReason: '', responseTimeMs: 0, testedAt: null,
        models: ['a', 'b'], modelMapping: { a: 'up-a' }, headers: { 'x-h': '1' },
      });
      const keys = [{ key: 'k1', weight: 2 }, { key: 'k2', disabled: true }] as unknown as NewChannel['keys'];
      const up = await channels.update(c.id, { keys, failureRules: { disableOn: [401] } as unknown as NewChannel['failureRules'], responseTimeMs: BIG, testedAt: BIG });
      expect(up).toMatchObject({ keys, failureRules: { disableOn: [401] }, responseTimeMs: BIG, testedAt: BIG });
      expect(await channels.byId(c.id)).toEqual(up!);
      expect(await channels.byId(c.id + 100)).toBeUndefined();
      expect(await channels.update(c.id + 100, { name: 'x' })).toBeUndefined();
    });

    test('all, delete, deleteMany (ids of the rows that existed), setStatusByTag', async () => {
      const { channels } = env().repos;
      const [a, b, c, d] = [await channels.insert(channel({ tag: 't' })), await channels.insert(channel({ tag: 't' })), await channels.insert(channel()), await channels.insert(channel())];
      expect((await channels.all()).length).toBe(4);
      expect((await channels.setStatusByTag('t', 2, 'manual', 77)).sort((x, y) => x - y)).toEqual([a!.id, b!.id]);
      expect(await channels.byId(a!.id)).toMatchObject({ status: 2, statusReason: 'manual', updatedAt: 77 });
      expect((await channels.byId(c!.id))!.status).toBe(1);
      expect(await channels.setStatusByTag('none', 2, '', 1)).toEqual([]);
      expect(await channels.delete(a!.id)).toBe(true);
      expect(await channels.delete(a!.id)).toBe(false);
      expect(await channels.deleteMany([])).toEqual([]);
      expect((await channels.deleteMany([a!.id, b!.id, c!.id, 9999])).sort((x, y) => x - y)).toEqual([b!.id, c!.id]);
      expect((await channels.all()).map((x) => x.id)).toEqual([d!.id]);
    });

    test('setHealthStatus writes unless the row is manually disabled (2)', async () => {
      const { channels } = env().repos;
      const c = await channels.insert(channel());
      expect(await channels.setHealthStatus(c.id, 3, 'down', 5)).toBe(true);
      expect(await channels.byId(c.id)).toMatchObject({ status: 3, statusReason: 'down', updatedAt: 5 });
      await channels.update(c.id, { status: 2, statusReason: 'disabled by an operator' });
      expect(await channels.setHealthStatus(c.id, 1, '', 6)).toBe(false);
      expect(await channels.byId(c.id)).toMatchObject({ status: 2, statusReason: 'disabled by an operator' });
      expect(await channels.setHealthStatus(c.id + 100, 1, '', 6)).toBe(false);
    });

    test('updateIf writes only while the stored key list and headers equal the ones read (compare-and-set)', async () => {
      const { channels } = env().repos;
      const c = await channels.insert(channel());
      const entry = (id: number, key: string, status: 1 | 3 = 1) => ({ id, key, status, reason: 'r é\n"q"', disabledAt: null, createdAt: 1 });
      // A legacy row's empty list matches.
      const one = [entry(1, 'k1')];
      expect(await channels.updateIf(c.id, { keys: [] }, { keys: one, key: 'k1', updatedAt: 2 })).toMatchObject({ keys: one, key: 'k1', updatedAt: 2 });
      const two = [entry(1, 'k1'), entry(2, 'k2')];
      expect(await channels.updateIf(c.id, { keys: one }, { keys: two })).toMatchObject({ keys: two });
      // A writer that read `one` lost the race: nothing written.
      expect(await channels.updateIf(c.id, { keys: one }, { keys: [entry(1, 'stale', 3)], name: 'lost' })).toBeUndefined();
      expect(await channels.byId(c.id)).toMatchObject({ keys: two, name: 'c' });
      expect(await channels.updateIf(c.id, { keys: [entry(1, 'k1'), entry(2, 'k2', 3)] }, { keys: one })).toBeUndefined();
      expect(await channels.updateIf(c.id + 100, { keys: two }, { keys: one })).toBeUndefined();
      // Headers, alone and with the key list: a value changed since the read is a miss.
      const h = { 'x-org': 'o é "1"', 'x-token': 'secret' };
      await channels.update(c.id, { headers: h });
      expect(await channels.updateIf(c.id, { headers: { ...h, 'x-token': 'other' } }, { name: 'lost' })).toBeUndefined();
      expect(await channels.updateIf(c.id, { headers: h, keys: one }, { name: 'lost' })).toBeUndefined();
      expect(await channels.updateIf(c.id, { headers: h, keys: two }, { name: 'kept', headers: {} })).toMatchObject({ name: 'kept', headers: {} });
    });

    test('list filters: status, tag, type, exact model in the JSON list, comma-group membership, keyword', async () => {
      const { channels } = env().repos;
      const a = await channels.insert(channel({ name: 'OpenAI main', models: ['gpt-4o', 'gpt-4o-mini'], group: 'default,vip', tag: 'oa' }));
      const b = await channels.insert(channel({ name: 'Claude 100%', type: 'anthropic', models: ['claude-3'], group: 'vip' }));
      const c = await channels.insert(channel({ name: 'backup', models: ['gpt-4o-mini', 'gpt'], group: 'default', status: 2, tag: 'oa' }));
      const d = await channels.insert(channel({ name: 'Ünicode', models: [], group: 'vipers' }));
      const ids = async (f: Record<string, unknown>) => (await channels.list({ offset: 0, limit: 50, ...f })).items.map((x) => x.id);
      expect(await ids({})).toEqual([d.id, c.id, b.id, a.id]);
      expect(await ids({ status: 2 })).toEqual([c.id]);
      expect(await ids({ tag: 'oa' })).toEqual([c.id, a.id]);
      expect(await ids({ tag: '' })).toEqual([d.id, b.id]);
      expect(await ids({ type: 'anthropic' })).toEqual([b.id]);
      expect(await ids({ model: 'gpt-4o' })).toEqual([a.id]);
      expect(await ids({ model: 'gpt' })).toEqual([c.id]);
      expect(await ids({ model: 'gpt%' })).toEqual([]);
      expect(await ids({ group: 'vip' })).toEqual([b.id, a.id]);
      expect(await ids({ group: 'default' })).toEqual([c.id, a.id]);
      expect(await ids({ group: 'vipers' })).toEqual([d.id]);
      expect(await ids({ group: 'default,vip' })).toEqual([a.id]);
      expect(await ids({ keyword: 'OPENAI' })).toEqual([a.id]);
      expect(await ids({ keyword: '0%' })).toEqual([b.id]);
      expect(await ids({ keyword: '_' })).toEqual([]);
      expect(await ids({ keyword: 'ünicode' })).toEqual([]);
      expect(await ids({ keyword: 'Ünic' })).toEqual([d.id]);
      expect(await ids({ model: 'gpt-4o-mini', tag: 'oa', status: 1 })).toEqual([a.id]);
      const page = await channels.list({ model: 'gpt-4o-mini', offset: 1, limit: 1 });
      expect(page).toEqual({ items: [a], total: 2 });
    });
  });

  describe('groups', () => {
    const env = useEnv(make);

    test('all is ordered by name bytewise; JSON fallbacks; unique names; update/delete', async () => {
      const { groups } = env().repos;
      const mk = async (name: string, over = {}) => (await groups.insert({ name, createdAt: 1, updatedAt: 1, ...over }))!;
      const vip = await mk('vip', { fallbacks: ['default', 'b'], ratio: 800, rateLimitTpm: BIG });
      await mk('default');
      await mk('Zeta');
      await mk('alpha');
      expect((await groups.all()).map((g) => g.name)).toEqual(['Zeta', 'alpha', 'default', 'vip']);
      expect(vip).toMatchObject({ description: '', ratio: 800, fallbacks: ['default', 'b'], rateLimitRpm: 0, rateLimitTpm: BIG, maxConcurrency: 0 });
      expect((await groups.byId((await mk('plain')).id))!.fallbacks).toEqual([]);
      // A taken name is refused without an error (a concurrent create elsewhere got it first): the caller answers 409.
      expect(await groups.insert({ name: 'vip', createdAt: 1, updatedAt: 1 })).toBeNull();
      expect(await groups.update(vip.id, { fallbacks: [], description: 'd' })).toMatchObject({ fallbacks: [], description: 'd' });
      expect(await groups.update(vip.id + 100, { description: 'd' })).toBeUndefined();
      expect(await groups.delete(vip.id)).toBe(true);
      expect(await groups.delete(vip.id)).toBe(false);
      expect(await groups.byId(vip.id)).toBeUndefined();
    });
  });

  describe('prices', () => {
    const env = useEnv(make);

    test('upsert inserts then replaces; JSON long-context tier; ordered by model bytewise; delete', async () => {
      const { prices } = env().repos;
      const lc = { input: 1, output: 2, cacheRead: 3, cacheWrite: 4, cacheWrite1h: 5 };
      const p = await prices.upsert({ model: 'm-b', input: BIG, output: 2, longContextThreshold: 200_000, longContext: lc, updatedAt: 1 });
      expect(p).toMatchObject({ model: 'm-b', input: BIG, output: 2, cacheRead: 0, cacheWrite: 0, cacheWrite1h: null, longContext: lc, audioInput: 0, contextWindow: null });
      const q = await prices.upsert({ model: 'm-b', input: 7, output: 8, updatedAt: 2 });
      expect(q).toMatchObject({ model: 'm-b', input: 7, output: 8, updatedAt: 2, longContext: lc, longContextThreshold: 200_000 });
      await prices.upsert({ model: 'M-a', input: 1, output: 1, updatedAt: 1 });
      await prices.upsert({ model: 'a', input: 1, output: 1, updatedAt: 1 });
      expect((await prices.all()).map((x) => x.model)).toEqual(['M-a', 'a', 'm-b']);
      expect(await prices.byModel('m-b')).toEqual(q);
      expect(await prices.byModel('M-B')).toBeUndefined();
      expect(await prices.delete('m-b')).toBe(true);
      expect(await prices.delete('m-b')).toBe(false);
    });
  });
}
