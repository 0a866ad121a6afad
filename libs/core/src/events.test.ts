import { expect, test } from 'bun:test';
import { ChangeBus } from './events';

test('synchronous listeners have all run when emit returns', () => {
  const bus = new ChangeBus();
  const seen: string[] = [];
  bus.on('user.changed', () => { seen.push('a'); });
  bus.on('user.changed', () => { seen.push('b'); });
  void bus.emit('user.changed', { userId: 1 });
  expect(seen).toEqual(['a', 'b']);
});

test('an asynchronous listener is awaited before the next one runs; emit resolves after all', async () => {
  const bus = new ChangeBus();
  const seen: string[] = [];
  let cache = 'old';
  bus.on('apikey.changed', () => { seen.push('first'); });
  bus.on('apikey.changed', async () => { await Bun.sleep(10); cache = 'new'; seen.push('cache'); });
  // Registered later (the in-flight guard): must see the refreshed cache.
  bus.on('apikey.changed', () => { seen.push(`guard saw ${cache}`); });
  const done = bus.emit('apikey.changed', { keyId: 1 });
  expect(seen).toEqual(['first']);
  await done;
  expect(seen).toEqual(['first', 'cache', 'guard saw new']);
});

test('a rejected refresh rejects the emit; a throwing listener throws at once', async () => {
  const bus = new ChangeBus();
  bus.on('price.changed', async () => { throw new Error('read failed'); });
  await expect(bus.emit('price.changed', { model: 'm' })).rejects.toThrow('read failed');
  const sync = new ChangeBus();
  sync.on('price.changed', () => { throw new Error('boom'); });
  expect(() => sync.emit('price.changed', { model: null })).toThrow('boom');
});

test('a failing refresh does not stop the later listeners (the in-flight guard still runs); the emit still rejects', async () => {
  const bus = new ChangeBus();
  const seen: string[] = [];
  bus.on('apikey.changed', async () => { await Bun.sleep(5); throw new Error('users cache: too many clients'); });
  bus.on('apikey.changed', async () => { await Bun.sleep(5); seen.push('key cache'); });
  bus.on('apikey.changed', () => { seen.push('guard'); });
  await expect(bus.emit('apikey.changed', { keyId: 1 })).rejects.toThrow('users cache: too many clients');
  expect(seen).toEqual(['key cache', 'guard']);
});

test('a synchronously throwing listener does not stop the later ones; the emit throws once they all ran', () => {
  const bus = new ChangeBus();
  const seen: string[] = [];
  bus.on('user.changed', () => { throw new Error('boom'); });
  bus.on('user.changed', () => { seen.push('guard'); });
  expect(() => bus.emit('user.changed', { userId: 1 })).toThrow('boom');
  expect(seen).toEqual(['guard']);
});

test('a throwing listener before an asynchronous one: every listener runs, the emit rejects with the failure', async () => {
  const bus = new ChangeBus();
  const seen: string[] = [];
  bus.on('user.changed', () => { throw new Error('first'); });
  bus.on('user.changed', async () => { await Bun.sleep(5); seen.push('cache'); });
  bus.on('user.changed', async () => { throw new Error('second'); });
  bus.on('user.changed', () => { seen.push('guard'); });
  const err = await bus.emit('user.changed', { userId: 1 }).then(() => null, (e: unknown) => e);
  expect(seen).toEqual(['cache', 'guard']);
  expect(err).toBeInstanceOf(AggregateError);
  expect((err as AggregateError).errors.map((e: Error) => e.message)).toEqual(['first', 'second']);
});
