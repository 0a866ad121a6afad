/** The limit flags shared by `key`, `user` and `group` (the API's limit fields; 0 = unlimited). */
import type { Field } from '../core/fields';

export const LIMIT_FIELDS: Field[] = [
  { name: 'rate_limit_rpm', kind: 'int', desc: 'requests per minute (0: unlimited)' },
  { name: 'rate_limit_tpm', kind: 'int', desc: 'tokens per minute, input bound + max_tokens counted at admission (0: unlimited)' },
  { name: 'max_concurrency', kind: 'int', desc: 'requests in flight at once (0: unlimited)' },
  { name: 'model_limits', kind: 'json', desc: 'limits per model pattern (name or prefix*), e.g. \'{"claude-opus-*":{"rate_limit_rpm":10}}\' (null: none)' },
];

/** Detail rows of the limit fields. */
export const limitRows = (r: any): Array<[string, unknown]> => [
  ['rate limit rpm', r.rate_limit_rpm], ['rate limit tpm', r.rate_limit_tpm], ['max concurrency', r.max_concurrency],
  ['model limits', r.model_limits ? JSON.stringify(r.model_limits) : null],
];
