import { expect, test } from 'bun:test';
import { hasAdapter } from '@gw/providers';
import { CHANNEL_TYPES } from './schemas';

test('every channel type an operator may configure has a provider adapter', () => {
  for (const t of CHANNEL_TYPES) expect(hasAdapter(t)).toBe(true);
});
