import { describe, expect, test } from 'bun:test';
import { pinModel } from './model-pin';

describe('pinModel', () => {
  test('no model field, or no object to hold one: forwarded as it is', () => {
    expect(pinModel({ type: 'session.update', session: { instructions: 'x' } }, 'session', 'm')).toBeUndefined();
    expect(pinModel({ type: 'session.update' }, 'session', 'm')).toBeUndefined();
    expect(pinModel({ type: 'session.update', session: 'm2' }, 'session', 'm')).toBeUndefined();
    expect(pinModel({ type: 'session.update', session: [{ model: 'm2' }] }, 'session', 'm')).toBeUndefined();
    // An inherited "model" is not the event's own field.
    expect(pinModel({ type: 'response.create', response: Object.create({ model: 'm2' }) }, 'response', 'm')).toBeUndefined();
  });

  test('another model, of any type, is refused and named', () => {
    expect(pinModel({ session: { model: 'm2' } }, 'session', 'm')).toEqual({ refuse: 'm2' });
    expect(pinModel({ session: { model: null } }, 'session', 'm')).toEqual({ refuse: '(not a string)' });
    expect(pinModel({ response: { model: ['m'] } }, 'response', 'm')).toEqual({ refuse: '(not a string)' });
    // A key some parsers match case-insensitively.
    expect(pinModel({ session: { model: 'm', Model: 'm2' } }, 'session', 'm')).toEqual({ refuse: 'm2' });
  });

  test('a deep value is never serialised', () => {
    let deep: unknown = [];
    for (let i = 0; i < 200_000; i++) deep = [deep];
    const t = performance.now();
    expect(pinModel({ session: { model: deep } }, 'session', 'm')).toEqual({ refuse: '(not a string)' });
    expect(performance.now() - t).toBeLessThan(50);
  });

  test('the admitted model is dropped from the forwarded event, the rest kept', () => {
    expect(pinModel({ type: 'session.update', event_id: 'e', session: { model: 'm', voice: 'alloy' } }, 'session', 'm'))
      .toEqual({ forward: '{"type":"session.update","event_id":"e","session":{"voice":"alloy"}}' });
    expect(pinModel({ session: { model: 'm', MODEL: 'm', voice: 'x' } }, 'session', 'm')).toEqual({ forward: '{"session":{"voice":"x"}}' });
  });
});
