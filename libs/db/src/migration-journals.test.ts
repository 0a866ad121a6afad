/**
 * Both migrators (drizzle's for SQLite, ours for PostgreSQL) apply only the migrations whose journal time is
 * later than the last one a database has applied: one whose `when` is not later than every earlier entry's would
 * be skipped for good on every database that had applied that earlier entry. drizzle-kit stamps the time of
 * generation, so a migration generated on another branch, or one stamped by hand, can break the order.
 */
import { expect, test } from 'bun:test';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dir, '../../..');

for (const journal of ['drizzle/meta/_journal.json', 'drizzle/pg/meta/_journal.json']) {
  test(`${journal}: every entry is later than all before it, and indexes follow the file order`, () => {
    const { entries } = JSON.parse(readFileSync(join(ROOT, journal), 'utf8')) as { entries: Array<{ idx: number; when: number; tag: string }> };
    const out = entries.flatMap((e, i) => (i > 0 && e.when <= entries[i - 1]!.when ? [`${e.tag} (${e.when}) is not after ${entries[i - 1]!.tag} (${entries[i - 1]!.when})`] : []));
    expect(out).toEqual([]);
    expect(entries.map((e) => e.idx)).toEqual(entries.map((_, i) => i));
    expect(entries.map((e) => Number(e.tag.slice(0, 4)))).toEqual(entries.map((_, i) => i));
  });
}
