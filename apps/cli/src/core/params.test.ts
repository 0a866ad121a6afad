import { describe, expect, test } from 'bun:test';
import { Command, Option } from 'commander';
import { ApiError } from './errors';
import { apiParams, inCliTerms, paramTable } from './params';

const err = (message: string, param = '', retryAfter?: number) => Object.assign(new ApiError(400, 'x', message, param), { retryAfter });

describe('inCliTerms', () => {
  const cmd = apiParams(new Command('t')
    .option('--allow-negative', 'x')
    .option('--provider <name>', 'x')
    .addOption(new Option('--kind <k>', 'x').choices(['a', 'b'])), { start_timestamp: { flag: '--from' } });
  const table = paramTable(cmd);

  test('the leading field becomes its flag; snake_case fields in the text too', () => {
    expect(inCliTerms(err('start_timestamp: Expected integer', 'start_timestamp'), table).message).toBe('--from: Expected integer');
    expect(inCliTerms(err('Balance 0 cannot cover a debit of 5; send allow_negative: true to go below zero', 'amount'), table).message)
      .toBe('Balance 0 cannot cover a debit of 5; send --allow-negative to go below zero');
  });

  test('plain words are not rewritten; the flag is put in front instead', () => {
    expect(inCliTerms(err('Payment provider p is not configured', 'provider'), table))
      .toEqual({ message: '--provider: Payment provider p is not configured', flag: '--provider' });
  });

  test('allowed values and retry-after are named; unknown params stay as the server said', () => {
    expect(inCliTerms(err('kind: Expected union value', 'kind'), table).message).toBe('--kind: Expected union value (allowed: a, b)');
    expect(inCliTerms(err('Locked', '', 61), table).message).toBe('Locked (retry after 61 s)');
    expect(inCliTerms(err('messages[0].role: bad', 'messages[0].role'), table)).toEqual({ message: 'messages[0].role: bad', flag: undefined });
  });
});
