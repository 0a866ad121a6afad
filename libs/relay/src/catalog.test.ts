import { expect, test } from 'bun:test';
import { ModelCatalog } from './catalog';

const channels = { candidates: () => [], models: () => ['m'], serves: () => true };
const adapter = () => { throw new Error('not used'); };

test('models are dated by `since` when given (every node of a cluster alike), else by the process start', async () => {
  const a = new ModelCatalog({ channels, adapter, since: 1_700_000_000 });
  await Bun.sleep(1100);
  const b = new ModelCatalog({ channels, adapter, since: 1_700_000_000 });
  expect(a.info('m').created_at).toBe('2023-11-14T22:13:20.000Z');
  expect(b.info('m').created_at).toBe(a.info('m').created_at);
  const own = new ModelCatalog({ channels, adapter });
  expect(Math.abs(Date.parse(own.info('m').created_at) - Date.now())).toBeLessThan(5_000);
  expect(own.info('m').created_at).not.toBe(a.info('m').created_at);
});
